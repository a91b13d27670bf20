// The signed-in session: tokens live in this module's memory only (never localStorage or
// sessionStorage). Refresh by rotation shortly before expiry, and once on a 401.

import { challengeFor, randomToken, safeReturnPath, savePending, takePending } from "./pkce";

export const CLIENT_ID = "nexus_web";
export const CALLBACK_PATH = "/auth/callback";
// admin: the Setup and admin screens (each request is still decided in Runtime)
const SCOPE = "api refresh_token admin";
const REFRESH_MARGIN_MS = 60_000;

interface Tokens {
  accessToken: string;
  refreshToken: string | null;
  expiresAt: number;
}

let tokens: Tokens | null = null;
let refreshTimer: ReturnType<typeof setTimeout> | undefined;
let refreshing: Promise<boolean> | null = null;
const listeners = new Set<() => void>();

export class SignInError extends Error {}

function notify(): void {
  listeners.forEach((listener) => listener());
}

export function onSessionChange(listener: () => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function accessToken(): string | null {
  return tokens?.accessToken ?? null;
}

export function isSignedIn(): boolean {
  return tokens !== null;
}

function redirectUri(): string {
  return window.location.origin + CALLBACK_PATH;
}

function store(body: Record<string, unknown>): void {
  const expiresIn = Number(body.expires_in ?? 900);
  tokens = {
    accessToken: String(body.access_token),
    refreshToken: typeof body.refresh_token === "string" ? body.refresh_token : null,
    expiresAt: Date.now() + expiresIn * 1000,
  };
  clearTimeout(refreshTimer);
  const wait = Math.max(5_000, expiresIn * 1000 - REFRESH_MARGIN_MS);
  if (tokens.refreshToken) refreshTimer = setTimeout(() => void refresh(), wait);
  notify();
}

function forget(): void {
  tokens = null;
  clearTimeout(refreshTimer);
  notify();
}

async function tokenRequest(form: Record<string, string>): Promise<Record<string, unknown>> {
  const reply = await fetch("/services/oauth2/token", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ ...form, client_id: CLIENT_ID }),
    credentials: "omit",
  });
  const body = (await reply.json().catch(() => ({}))) as Record<string, unknown>;
  if (!reply.ok || typeof body.access_token !== "string") {
    throw new SignInError(
      typeof body.error_description === "string" ? body.error_description : "Sign-in failed",
    );
  }
  return body;
}

/** Leave for Identity's sign-in page; come back to `returnPath` afterwards. */
export async function startSignIn(returnPath: string): Promise<void> {
  const verifier = randomToken(48);
  const state = randomToken(16);
  savePending({ verifier, state, returnPath: safeReturnPath(returnPath) });
  const params = new URLSearchParams({
    response_type: "code",
    client_id: CLIENT_ID,
    redirect_uri: redirectUri(),
    scope: SCOPE,
    state,
    code_challenge: await challengeFor(verifier),
    code_challenge_method: "S256",
  });
  window.location.assign(`/services/oauth2/authorize?${params}`);
}

/** On `/auth/callback`: trade the code for tokens; the path to return to. */
export async function completeSignIn(search: string): Promise<string> {
  const params = new URLSearchParams(search);
  const pending = takePending();
  if (params.get("error")) {
    throw new SignInError(params.get("error_description") || "Sign-in was cancelled");
  }
  const code = params.get("code");
  if (!pending || !code || params.get("state") !== pending.state) {
    throw new SignInError("This sign-in link is not valid any more; please sign in again");
  }
  store(
    await tokenRequest({
      grant_type: "authorization_code",
      code,
      redirect_uri: redirectUri(),
      code_verifier: pending.verifier,
    }),
  );
  return safeReturnPath(pending.returnPath);
}

/** Rotate the refresh token; false (and signed out) when the session is gone. */
export function refresh(): Promise<boolean> {
  if (refreshing) return refreshing;
  const current = tokens?.refreshToken;
  if (!current) return Promise.resolve(false);
  refreshing = tokenRequest({ grant_type: "refresh_token", refresh_token: current })
    .then((body) => {
      store(body);
      return true;
    })
    .catch(() => {
      forget();
      return false;
    })
    .finally(() => {
      refreshing = null;
    });
  return refreshing;
}

/** Revoke the session at Identity (refresh token: the whole session) and forget it here. */
export async function signOut(): Promise<void> {
  const token = tokens?.refreshToken ?? tokens?.accessToken;
  forget();
  if (!token) return;
  await fetch("/services/oauth2/revoke", {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token, client_id: CLIENT_ID }),
    credentials: "omit",
  }).catch(() => undefined);
}

/** Drop the session without a network call (the server already ended it). */
export function sessionExpired(): void {
  forget();
}
