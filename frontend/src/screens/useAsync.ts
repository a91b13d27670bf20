import { useCallback, useEffect, useState } from "react";
import { SessionExpired } from "../api/http";

export interface AsyncState<T> {
  data?: T;
  error?: string;
  loading: boolean;
  reload: () => void;
}

/** Load on mount and when `deps` change; the error is a short human message. */
export function useAsync<T>(load: () => Promise<T>, deps: unknown[]): AsyncState<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ data: s.data, loading: true }));
    load().then(
      (data) => live && setState({ data, loading: false }),
      (error: unknown) => {
        if (!live || error instanceof SessionExpired) return;
        setState({ loading: false, error: errorText(error) });
      },
    );
    return () => {
      live = false;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps -- the caller's deps (spread, so the rule cannot read them) plus `tick`; `load` is a fresh closure every render and must not re-run the load by itself
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

export function errorText(error: unknown): string {
  if (error instanceof Error && error.message && error.message.length < 400 && !/\n\s+at /.test(error.message)) {
    return error.message;
  }
  return "Something unexpected happened. Try again.";
}
