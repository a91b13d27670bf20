// jsforce against the Nexus sfcrm dialect. Reads its settings as JSON on stdin, prints one
// JSON line {"ok": true, ...} on success; any failed check exits non-zero with the reason.
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
const user = await conn.login(input.username, input.password);
assert.ok(user.id && user.organizationId, "login names the user and org");
assert.equal(conn.instanceUrl, input.loginUrl);

// CRUD
const accounts = conn.sobject("Account");
const created = await accounts.create({ Name: "JS Account" });
assert.equal(created.success, true);
const fetched = await accounts.retrieve(created.id);
assert.equal(fetched.Name, "JS Account");
assert.equal(fetched.attributes.type, "Account");
await accounts.update({ Id: created.id, Name: "JS Account 2" });
assert.equal((await accounts.retrieve(created.id)).Name, "JS Account 2");

// upsert by external id: created, then updated
const ext = "External_Customer_Id__c";
const first = await accounts.upsert({ Name: "JS Upsert", [ext]: "JS-1" }, ext);
assert.equal(first.success, true);
assert.equal(first.created, true);
const again = await accounts.upsert({ Name: "JS Upserted", [ext]: "JS-1" }, ext);
assert.equal(again.success, true);
assert.equal(again.created, false);
const upserted = await accounts.find({ [ext]: "JS-1" }, ["Id", "Name"]);
assert.deepEqual(upserted.map((r) => r.Name), ["JS Upserted"]);

// describe
const described = await accounts.describe();
assert.ok(described.fields.some((f) => f.name === "External_Customer_Id__c" && f.externalId));
const global = await conn.describeGlobal();
assert.ok(global.sobjects.some((s) => s.name === "Contact"));

// bulk-style arrays through sObject collections
const contacts = conn.sobject("Contact");
const many = await contacts.create([
  { LastName: "Lovelace", Name: "Ada Lovelace", Skills__c: "Python;Go", AccountId: created.id },
  { LastName: "Hopper", Name: "Grace Hopper", Skills__c: "Rust" },
  { LastName: "Turing", Name: "Alan Turing", Skills__c: "Go" },
]);
assert.equal(many.length, 3);
assert.ok(many.every((r) => r.success), JSON.stringify(many));
const ids = many.map((r) => r.id);
const renamed = await contacts.update(ids.map((Id, i) => ({ Id, Email: `p${i}@example.com` })));
assert.ok(renamed.every((r) => r.success), JSON.stringify(renamed));

// find() emits SOQL with IN and INCLUDES
const goPeople = await contacts.find(
  { Id: { $in: ids }, Skills__c: { $includes: ["Go"] } },
  ["Id", "LastName", "Email"],
).sort({ LastName: 1 });
assert.deepEqual(goPeople.map((r) => r.LastName), ["Lovelace", "Turing"]);
assert.equal(goPeople[0].Email, "p0@example.com");
const withParent = await contacts.find({ Id: ids[0] }, ["Id", "Account.Name"]);
assert.equal(withParent[0].Account.Name, "JS Account 2");

// destroy arrays and single records
const destroyed = await contacts.destroy(ids);
assert.ok(destroyed.every((r) => r.success), JSON.stringify(destroyed));
assert.equal((await contacts.find({ Id: { $in: ids } }, ["Id"])).length, 0);
await accounts.destroy(created.id);

// errors carry Salesforce error codes
await assert.rejects(accounts.retrieve(created.id), (err) => err.errorCode === "NOT_FOUND");
await assert.rejects(
  conn.query("SELEKT Id FROM Account"),
  (err) => err.errorCode === "MALFORMED_QUERY",
);

console.log(JSON.stringify({ ok: true, created: ids.length }));
