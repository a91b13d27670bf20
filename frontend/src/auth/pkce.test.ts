import { describe, expect, it } from "vitest";
import { challengeFor, PENDING_KEY, randomToken, safeReturnPath, savePending, takePending } from "./pkce";
import { toApiError } from "../api/http";

describe("PKCE", () => {
  it("derives the RFC 7636 S256 challenge", async () => {
    // Appendix B of RFC 7636
    expect(await challengeFor("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")).toBe(
      "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
    );
  });

  it("verifiers are long, url-safe and different each time", () => {
    const a = randomToken(48);
    expect(a).toMatch(/^[A-Za-z0-9_-]{64}$/);
    expect(randomToken(48)).not.toBe(a);
  });

  it("the round-trip state is read once", () => {
    savePending({ verifier: "v", state: "s", returnPath: "/r/Account/1" });
    expect(takePending()).toEqual({ verifier: "v", state: "s", returnPath: "/r/Account/1" });
    expect(sessionStorage.getItem(PENDING_KEY)).toBeNull();
    expect(takePending()).toBeNull();
  });

  it("returns only to same-origin paths", () => {
    expect(safeReturnPath("/o/Account?x=1")).toBe("/o/Account?x=1");
    expect(safeReturnPath("//evil.example/x")).toBe("/");
    expect(safeReturnPath("https://evil.example")).toBe("/");
    expect(safeReturnPath("/auth/callback?code=1")).toBe("/");
  });
});

describe("API errors", () => {
  it("the dialect's field errors land on their fields", () => {
    const error = toApiError(400, [
      { errorCode: "FIELD_CUSTOM_VALIDATION_EXCEPTION", message: "revenue cannot be negative", fields: ["AnnualRevenue"] },
    ]);
    expect(error.fieldErrors).toEqual({ AnnualRevenue: "revenue cannot be negative" });
    expect(error.code).toBe("FIELD_CUSTOM_VALIDATION_EXCEPTION");
  });

  it("server failures never show their body", () => {
    const error = toApiError(500, { message: "Traceback (most recent call last):\n  File x" });
    expect(error.message).not.toContain("Traceback");
    expect(error.message).toContain("500");
  });
});
