// jsforce's Bulk API 2.0 (conn.bulk2) against the Nexus sfcrm dialect: an ingest job through
// loadAndWaitForResults and a query job. Settings as JSON on stdin; prints one JSON line
// {"ok": true, ...} on success; any failed check exits non-zero with the reason.
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
conn.bulk2.pollInterval = 200;
conn.bulk2.pollTimeout = 60000;

const tag = input.tag;
const records = [];
for (let n = 1; n <= 300; n++) {
  records.push({ LastName: `${tag} ${String(n).padStart(3, "0")}`, Name: `JS ${n}` });
}
records.push({ LastName: "", Name: "No last name" });
const loaded = await conn.bulk2.loadAndWaitForResults({
  object: "Contact",
  operation: "insert",
  input: records,
});
assert.equal(loaded.successfulResults.length, 300);
assert.equal(loaded.failedResults.length, 1);
assert.ok(loaded.failedResults[0].sf__Error.startsWith("REQUIRED_FIELD_MISSING"));
assert.ok(loaded.successfulResults.every((r) => r.sf__Id.startsWith("003")));

const stream = await conn.bulk2.query(
  `SELECT Id, LastName FROM Contact WHERE LastName LIKE '${tag}%'`,
);
const queried = await new Promise((resolve, reject) => {
  const rows = [];
  stream.on("record", (r) => rows.push(r));
  stream.on("error", reject);
  stream.on("end", () => resolve(rows));
});
assert.equal(queried.length, 300);
assert.ok(queried.every((r) => r.LastName.startsWith(tag)));

console.log(JSON.stringify({ ok: true, inserted: loaded.successfulResults.length, queried: queried.length }));
