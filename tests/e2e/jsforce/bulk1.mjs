// jsforce's Bulk API 1.0 (conn.bulk) against the Nexus sfcrm dialect: an insert through
// conn.bulk.load (XML job info, a CSV batch, CSV results) and a bulk query (CSV results).
// Settings as JSON on stdin; prints one JSON line {"ok": true, ...} on success; any failed
// check exits non-zero with the reason.
import assert from "node:assert/strict";
import jsforce from "jsforce";

const input = await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (chunk) => (data += chunk));
  process.stdin.on("end", () => resolve(JSON.parse(data)));
});

const conn = new jsforce.Connection({
  oauth2: { loginUrl: input.loginUrl, clientId: input.clientId, clientSecret: input.clientSecret },
  version: input.version,
});
await conn.login(input.username, input.password);
conn.bulk.pollInterval = 200;
conn.bulk.pollTimeout = 60000;

const tag = input.tag;
const records = [];
for (let n = 1; n <= 200; n++) {
  records.push({ LastName: `${tag} ${String(n).padStart(3, "0")}`, Name: `JS ${n}`, Title: "a, \"b\"" });
}
records.push({ LastName: "", Name: "No last name" });
const loaded = await conn.bulk.load("Contact", "insert", records);
assert.equal(loaded.length, 201);
const ok = loaded.filter((r) => r.success);
assert.equal(ok.length, 200);
assert.ok(ok.every((r) => r.created && r.id.startsWith("003")));
const failed = loaded.filter((r) => !r.success);
assert.equal(failed.length, 1);
assert.ok(failed[0].errors[0].startsWith("REQUIRED_FIELD_MISSING"));

const stream = await conn.bulk.query(
  `SELECT Id, LastName, Title FROM Contact WHERE LastName LIKE '${tag}%'`,
);
const queried = await new Promise((resolve, reject) => {
  const rows = [];
  stream.on("record", (r) => rows.push(r));
  stream.on("error", reject);
  stream.on("end", () => resolve(rows));
});
assert.equal(queried.length, 200);
assert.ok(queried.every((r) => r.LastName.startsWith(tag) && r.Title === "a, \"b\""));
assert.deepEqual(new Set(queried.map((r) => r.Id)), new Set(ok.map((r) => r.id)));

console.log(JSON.stringify({ ok: true, inserted: ok.length, queried: queried.length }));
