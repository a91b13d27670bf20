import { afterEach, describe, expect, it } from "vitest";
import { MAX_RECENT, forgetViewed, recentlyViewed, rememberViewed } from "./recent";

afterEach(() => forgetViewed());
const record = (id: string, name = `R ${id}`) => ({ object: "Account", objectLabel: "Account", id, name });

describe("recently viewed", () => {
  it("puts the last opened first, once, and keeps the last few", () => {
    for (let i = 0; i < MAX_RECENT + 2; i++) rememberViewed(record(String(i)));
    rememberViewed(record("5", "Renamed"));
    const list = recentlyViewed();
    expect(list).toHaveLength(MAX_RECENT);
    expect(list[0]).toEqual(record("5", "Renamed"));
    expect(list.filter((r) => r.id === "5")).toHaveLength(1);
    expect(list.map((r) => r.id)).not.toContain("0");
  });

  it("forgets a deleted record, and everything on sign-out", () => {
    rememberViewed(record("a"));
    rememberViewed(record("b"));
    forgetViewed("a");
    expect(recentlyViewed().map((r) => r.id)).toEqual(["b"]);
    forgetViewed();
    expect(recentlyViewed()).toEqual([]);
  });
});
