// Sign-in completion, scheduled refresh by rotation, one refresh on 401, sign-out revocation.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { api, SessionExpired } from "../api/http";
import { savePending } from "./pkce";
import { accessToken, completeSignIn, isSignedIn, onSessionChange, signOut } from "./session";

type Call = { url: string; body: string; auth: string | null };
let calls: Call[];
let issued: number;
let apiStatus: (auth: string | null) => number;
let refreshWorks: boolean;

function tokenReply(): Response {
  issued += 1;
  return new Response(
    JSON.stringify({ access_token: `access-${issued}`, refresh_token: `refresh-${issued}`, expires_in: 900 }),
    { status: 200 },
  );
}

beforeEach(() => {
  vi.useFakeTimers();
  calls = [];
  issued = 0;
  refreshWorks = true;
  apiStatus = () => 200;
  vi.stubGlobal("fetch", vi.fn(async (url: string, init: RequestInit = {}) => {
    const body = init.body ? String(init.body) : "";
    calls.push({ url, body, auth: new Headers(init.headers).get("Authorization") });
    if (url === "/services/oauth2/token") {
      if (body.includes("grant_type=refresh_token") && !refreshWorks) {
        return new Response(JSON.stringify({ error: "invalid_grant" }), { status: 400 });
      }
      return tokenReply();
    }
    if (url === "/services/oauth2/revoke") return new Response("", { status: 200 });
    const status = apiStatus(new Headers(init.headers).get("Authorization"));
    return new Response(status === 200 ? "{\"ok\":true}" : "[]", { status });
  }));
});

afterEach(async () => {
  await signOut();
  vi.unstubAllGlobals();
  vi.useRealTimers();
});

async function signIn(): Promise<string> {
  savePending({ verifier: "the-verifier", state: "st", returnPath: "/r/Account/001000000000001AAA" });
  return completeSignIn("?code=abc&state=st");
}

describe("session", () => {
  it("trades the code with the verifier and keeps tokens out of web storage", async () => {
    expect(await signIn()).toBe("/r/Account/001000000000001AAA");
    expect(calls[0].body).toContain("grant_type=authorization_code");
    expect(calls[0].body).toContain("code_verifier=the-verifier");
    expect(calls[0].body).toContain("client_id=nexus_web");
    expect(accessToken()).toBe("access-1");
    expect(JSON.stringify({ ...localStorage, ...sessionStorage })).not.toContain("access-1");
    expect(sessionStorage.length + localStorage.length).toBe(0);
  });

  it("refuses a callback whose state does not match", async () => {
    savePending({ verifier: "v", state: "expected", returnPath: "/" });
    await expect(completeSignIn("?code=abc&state=forged")).rejects.toThrow("not valid");
    expect(calls).toEqual([]);
  });

  it("refreshes by rotation a minute before the access token expires", async () => {
    await signIn();
    await vi.advanceTimersByTimeAsync(839_000);
    expect(accessToken()).toBe("access-1");
    await vi.advanceTimersByTimeAsync(2_000);
    expect(accessToken()).toBe("access-2");
    expect(calls[1].body).toContain("refresh_token=refresh-1");
  });

  it("on a 401: one refresh, then the request again with the new token", async () => {
    await signIn();
    apiStatus = (auth) => (auth === "Bearer access-1" ? 401 : 200);
    expect(await api("/services/data/v62.0/ui-api/nav-items")).toEqual({ ok: true });
    expect(calls.map((c) => c.auth ?? c.url)).toEqual([
      "/services/oauth2/token", "Bearer access-1", "/services/oauth2/token", "Bearer access-2",
    ]);
  });

  it("when the refresh is refused the session ends and listeners hear it", async () => {
    await signIn();
    const heard = vi.fn();
    const stop = onSessionChange(heard);
    apiStatus = () => 401;
    refreshWorks = false;
    await expect(api("/services/data/v62.0/ui-api/nav-items")).rejects.toBeInstanceOf(SessionExpired);
    expect(isSignedIn()).toBe(false);
    expect(heard).toHaveBeenCalled();
    stop();
  });

  it("sign-out revokes the refresh token and forgets the session", async () => {
    await signIn();
    await signOut();
    const revoke = calls.find((c) => c.url === "/services/oauth2/revoke");
    expect(revoke?.body).toContain("token=refresh-1");
    expect(isSignedIn()).toBe(false);
  });
});
