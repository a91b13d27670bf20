// Recently viewed records: kept in memory for this browser session only (Runtime has no place
// for them; never in web storage). A reload or sign-out forgets them, as it forgets the token.
import { useEffect, useState } from "react";

export interface RecentRecord {
  object: string;
  objectLabel: string;
  id: string;
  name: string;
}

export const MAX_RECENT = 8;
let recent: RecentRecord[] = [];
const listeners = new Set<() => void>();
const changed = () => listeners.forEach((listener) => listener());

/** The record just opened goes first; it appears once; the list keeps the last MAX_RECENT. */
export function rememberViewed(record: RecentRecord): void {
  const first = recent[0];
  if (first && first.id === record.id && first.name === record.name) return;
  recent = [record, ...recent.filter((r) => r.id !== record.id)].slice(0, MAX_RECENT);
  changed();
}

/** A record that is gone (deleted) leaves the list. */
export function forgetViewed(id?: string): void {
  recent = id === undefined ? [] : recent.filter((r) => r.id !== id);
  changed();
}

export function recentlyViewed(): RecentRecord[] {
  return recent;
}

export function useRecentlyViewed(): RecentRecord[] {
  const [list, setList] = useState(recent);
  useEffect(() => {
    const update = () => setList(recent);
    listeners.add(update);
    update();
    return () => void listeners.delete(update);
  }, []);
  return list;
}
