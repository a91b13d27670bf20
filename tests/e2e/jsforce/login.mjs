// jsforce's default sign-in against Nexus: `login()` without OAuth settings is the partner SOAP
// API's login; `logout()` is SOAP's logout for that session and a token-only revoke for an
// OAuth one. Reads its settings as JSON on stdin, prints one JSON line {"ok": true, ...} on
// success; any failed check exits non-zero with the reason.
import assert from "node:assert/strict";
import jsforce from "jsforce";

const input = await new Promise((resolve) => {
  let data = "";
  process.stdin.on("data", (chunk) => (data += chunk));
  process.stdin.on("end", () => resolve(JSON.parse(data)));
});
const SESSION_ID = /^00D\w{15}![.\w]+$/; // what the `sf` CLI accepts as an access token
const staleness = input.stalenessSeconds * 1000;

// A REST call with a session that has ended fails with INVALID_SESSION_ID (within the
// security staleness bound: another replica may have seen the session a moment ago).
async function refusedAfterwards(accessToken) {
  const stale = new jsforce.Connection({
    instanceUrl: input.loginUrl,
    accessToken,
    version: input.version,
  });
  const until = Date.now() + staleness + 2000;
  for (;;) {
    try {
      await stale.query("SELECT Id FROM Account");
    } catch (error) {
      assert.equal(error.errorCode, "INVALID_SESSION_ID", String(error));
      return;
    }
    assert.ok(Date.now() < until, "the ended session still worked past the staleness bound");
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

// 1. SOAP login (no oauth2 settings), a write and a query, SOAP logout
const conn = new jsforce.Connection({ loginUrl: input.loginUrl, version: input.version });
const user = await conn.login(input.username, input.password);
assert.ok(user.id.startsWith("005") && user.organizationId.startsWith("00D"), JSON.stringify(user));
assert.match(conn.accessToken, SESSION_ID);
assert.ok(conn.accessToken.startsWith(`${user.organizationId}!`));
assert.equal(conn.instanceUrl, input.loginUrl); // from the login's serverUrl
const created = await conn.sobject("Account").create({ Name: "JS SOAP Account" });
assert.equal(created.success, true);
const found = await conn.query("SELECT Id, Name FROM Account WHERE Name = 'JS SOAP Account'");
assert.deepEqual(found.records.map((r) => r.Id), [created.id]);
const identity = await conn.identity();
assert.equal(identity.username, input.username);
const soapSession = conn.accessToken;
await conn.logout();
assert.ok(!conn.accessToken, "logout forgets the session");
await refusedAfterwards(soapSession);

// 2. a wrong password: jsforce rejects with Salesforce's fault string
await assert.rejects(
  new jsforce.Connection({ loginUrl: input.loginUrl, version: input.version }).login(
    input.username,
    "not-the-password",
  ),
  (error) => {
    assert.equal(
      error.message,
      "INVALID_LOGIN: Invalid username, password, security token; or user locked out.",
    );
    return true;
  },
);

// 3. OAuth password flow: the access token has the same shape; logout() revokes it with the
//    token alone (POST /services/oauth2/revoke, no client credentials)
const oauth = new jsforce.Connection({
  oauth2: { loginUrl: input.loginUrl, clientId: input.clientId, clientSecret: input.clientSecret },
  version: input.version,
});
await oauth.login(input.username, input.password);
assert.match(oauth.accessToken, SESSION_ID);
assert.equal((await oauth.query("SELECT Id FROM Account WHERE Id = '" + created.id + "'")).totalSize, 1);
const oauthSession = oauth.accessToken;
await oauth.logout();
await refusedAfterwards(oauthSession);

console.log(JSON.stringify({ ok: true, organizationId: user.organizationId }));
