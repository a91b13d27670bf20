// A small history router: paths are the app's state; links are real anchors.
import { useEffect, useState } from "react";

const EVENT = "nexus:navigate";

export function navigate(path: string, replace = false): void {
  if (replace) window.history.replaceState(null, "", path);
  else window.history.pushState(null, "", path);
  window.dispatchEvent(new Event(EVENT));
}

export function currentPath(): string {
  return window.location.pathname + window.location.search;
}

export function usePath(): string {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const update = () => setPath(currentPath());
    window.addEventListener("popstate", update);
    window.addEventListener(EVENT, update);
    return () => {
      window.removeEventListener("popstate", update);
      window.removeEventListener(EVENT, update);
    };
  }, []);
  return path;
}

export type Route =
  | { name: "home" }
  | { name: "list"; object: string; view: string | null }
  | { name: "record"; object: string; id: string }
  | { name: "callback" }
  | { name: "admin"; section: string }
  | { name: "notFound" };

export function parseRoute(path: string): Route {
  const clean = path.split("?")[0].replace(/\/+$/, "") || "/";
  const parts = clean.split("/").filter(Boolean).map(decodeURIComponent);
  if (clean === "/") return { name: "home" };
  if (clean === "/auth/callback") return { name: "callback" };
  if (parts[0] === "o" && parts.length === 2) {
    return { name: "list", object: parts[1], view: new URLSearchParams(path.split("?")[1] ?? "").get("view") };
  }
  if (parts[0] === "admin" && parts.length <= 2) return { name: "admin", section: parts[1] ?? "integration" };
  if (parts[0] === "r" && parts.length === 3) return { name: "record", object: parts[1], id: parts[2] };
  return { name: "notFound" };
}

export const paths = {
  list: (object: string) => `/o/${encodeURIComponent(object)}`,
  record: (object: string, id: string) => `/r/${encodeURIComponent(object)}/${encodeURIComponent(id)}`,
};
