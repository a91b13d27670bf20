// Helpers the admin panels share (kept out of AdminScreen.tsx, which imports the panels, so the
// admin import graph has no cycle).
import { useState } from "react";
import { useToast } from "../ui/components";
import { errorText } from "../screens/useAsync";

/** A dated, short stamp for tables ("2026-11-29 22:05:11"). */
export function stamp(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return "—";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? "—" : date.toISOString().replace("T", " ").slice(0, 19);
}

/** Run an action, toast its outcome, reload; errors are short messages. */
export function useAction(reload: () => void) {
  const toast = useToast();
  return async (run: () => Promise<unknown>, success: string) => {
    try {
      await run();
      toast(success);
      reload();
    } catch (error) {
      toast(errorText(error), "error");
    }
  };
}

/** Run a replay, toast its summary, keep its refusal lines, clear the selection, refresh. */
export function useReplay<R extends { refused: number }>(outcome: (report: R) => [string[], string], onChange: () => void) {
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [report, setReport] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const toast = useToast();
  const act = async (run: () => Promise<R>, what: string) => {
    setBusy(true);
    try {
      const done = await run();
      const [lines, summary] = outcome(done);
      setReport(lines);
      setSelected(new Set());
      toast(`${what}: ${summary}`, done.refused ? "error" : "success");
      onChange();
    } catch (error) {
      setReport([errorText(error)]);
    } finally {
      setBusy(false);
    }
  };
  const toggle = (key: string) =>
    setSelected((s) => { const next = new Set(s); if (next.has(key)) next.delete(key); else next.add(key); return next; });
  return { act, busy, report, selected, toggle };
}
