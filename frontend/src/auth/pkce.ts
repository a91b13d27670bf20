// PKCE (RFC 7636, S256) and the one-round-trip state kept in sessionStorage.

export const PENDING_KEY = "nexus.signin";

export interface PendingSignIn {
  verifier: string;
  state: string;
  returnPath: string;
}

function base64url(bytes: Uint8Array): string {
  let text = "";
  bytes.forEach((b) => (text += String.fromCharCode(b)));
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function randomToken(size = 48): string {
  const bytes = new Uint8Array(size);
  crypto.getRandomValues(bytes);
  return base64url(bytes);
}

export async function challengeFor(verifier: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier));
  return base64url(new Uint8Array(digest));
}

/** Only a same-origin path may be a return target (no `//host`, no scheme). */
export function safeReturnPath(path: string | null | undefined): string {
  if (!path || !path.startsWith("/") || path.startsWith("//") || path.startsWith("/\\")) return "/";
  if (path.startsWith("/auth/")) return "/";
  return path;
}

export function savePending(pending: PendingSignIn): void {
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
}

/** Read and forget: the verifier is used once. */
export function takePending(): PendingSignIn | null {
  const raw = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY);
  if (!raw) return null;
  try {
    const parsed = JSON.parse(raw) as PendingSignIn;
    return typeof parsed.verifier === "string" && typeof parsed.state === "string" ? parsed : null;
  } catch {
    return null;
  }
}
