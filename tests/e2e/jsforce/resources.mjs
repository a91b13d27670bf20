// jsforce against the sfcrm resources beyond CRUD and query (tests/integration/
// test_sfcrm_resources.py runs it): Get Updated / Get Deleted, recent items, collections
// retrieve, composite tree and batch, a relationship read. Reads {instanceUrl, accessToken,
// version} as JSON on stdin; prints one JSON line {"ok": true} or exits non-zero.
import assert from "node:assert/strict";
import jsforce from "jsforce";

const input = await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (chunk) => (data += chunk));
  process.stdin.on("end", () => resolve(JSON.parse(data)));
});
const conn = new jsforce.Connection({
  instanceUrl: input.instanceUrl,
  accessToken: input.accessToken,
  version: input.version,
});
const base = `/services/data/v${input.version}`;

const contacts = conn.sobject("Contact");
const kept = await contacts.create({ Name: "JS Kept", LastName: "Kept" });
const gone = await contacts.create({ Name: "JS Gone", LastName: "Gone" });
await contacts.destroy(gone.id);
const start = new Date(Date.now() - 10 * 60 * 1000);
const end = new Date(Date.now() + 5 * 60 * 1000);
const updated = await contacts.updated(start, end);
assert.ok(updated.ids.includes(kept.id), JSON.stringify(updated));
assert.ok(!updated.ids.includes(gone.id));
const deleted = await contacts.deleted(start, end);
assert.ok(deleted.deletedRecords.some((r) => r.id === gone.id), JSON.stringify(deleted));
await assert.rejects(
  contacts.updated(new Date(Date.now() - 40 * 86400 * 1000), end),
  (err) => err.errorCode === "INVALID_REPLICATION_DATE",
);

const tree = await conn.requestPost(`${base}/composite/tree/Account`, {
  records: [
    {
      attributes: { type: "Account", referenceId: "jsAcme" },
      Name: "JS Tree",
      Contacts: {
        records: [
          { attributes: { type: "Contact", referenceId: "jsAda" }, Name: "Ada", LastName: "Ada" },
        ],
      },
    },
  ],
});
assert.equal(tree.hasErrors, false, JSON.stringify(tree));
const ids = Object.fromEntries(tree.results.map((r) => [r.referenceId, r.id]));

const recent = await conn.recent(2);
assert.equal(recent.length, 2);
assert.ok([ids.jsAcme, ids.jsAda].includes(recent[0].Id), JSON.stringify(recent));
const recentAccounts = await conn.recent("Account");
assert.equal(recentAccounts[0].Id, ids.jsAcme);

const many = await conn.sobject("Account").retrieve([ids.jsAcme, kept.id.replace(/^003/, "001")], {
  fields: ["Name"],
});
assert.equal(many[0].Name, "JS Tree");
assert.equal(many[1], null);

const related = await conn.request(`${base}/sobjects/Account/${ids.jsAcme}/Contacts`);
assert.deepEqual(related.records.map((r) => r.Id), [ids.jsAda]);

const batch = await conn.requestPost(`${base}/composite/batch`, {
  batchRequests: [
    { method: "GET", url: `v${input.version}/sobjects/Contact/${ids.jsAda}/Account` },
    { method: "DELETE", url: `v${input.version}/sobjects/Contact/${gone.id}` },
  ],
});
assert.equal(batch.hasErrors, true);
assert.deepEqual(batch.results.map((r) => r.statusCode), [200, 404]);
assert.equal(batch.results[0].result.Id, ids.jsAcme);

console.log(JSON.stringify({ ok: true }));
