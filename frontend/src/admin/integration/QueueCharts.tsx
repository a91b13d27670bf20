// Live queue charts: depth, in flight, oldest pending and throughput per queue, polled.
import { useEffect, useState } from "react";
import { queues, summarize, throughput, type Sample } from "../../api/admin";
import { EmptyState, ErrorState, Spinner } from "../../ui/components";
import { errorText } from "../../screens/useAsync";
import { Sparkline } from "../Sparkline";

const REFRESH_MS = 3000;
const KEEP = 30;

export function QueueCharts() {
  const [samples, setSamples] = useState<Sample[]>([]);
  const [error, setError] = useState<string>();
  useEffect(() => {
    let live = true;
    const poll = () =>
      queues().then(
        (rows) => {
          if (!live) return;
          setError(undefined);
          setSamples((all) => [...all, { at: Date.now(), points: summarize(rows) }].slice(-KEEP));
        },
        (e: unknown) => live && setError(errorText(e)),
      );
    void poll();
    const timer = window.setInterval(poll, REFRESH_MS);
    return () => {
      live = false;
      window.clearInterval(timer);
    };
  }, []);
  const latest = samples[samples.length - 1];
  const keys = latest ? [...latest.points.keys()].sort() : [];
  const series = (key: string, pick: (p: { depth: number; inFlight: number; oldestAge: number }) => number) =>
    samples.map((s) => { const p = s.points.get(key); return p ? pick(p) : 0; });
  return (
    <section className="card admin-section" aria-labelledby="queues-title">
      <h2 id="queues-title">Queues <span className="muted">(live, every {REFRESH_MS / 1000} s)</span></h2>
      {error && <ErrorState message={error} />}
      {!latest && !error && <Spinner label="Loading queues…" />}
      {latest && !keys.length && <EmptyState title="No queues yet">Work appears here once webhooks arrive.</EmptyState>}
      <ul className="queue-grid">
        {keys.map((key) => (
          <li key={key} className="queue-tile" aria-label={key}>
            <h3>{key}</h3>
            <div className="sparks">
              <Sparkline label="Depth" values={series(key, (p) => p.depth)} />
              <Sparkline label="In flight" values={series(key, (p) => p.inFlight)} />
              <Sparkline label="Oldest pending" values={series(key, (p) => p.oldestAge)} unit=" s" />
              <Sparkline label="Throughput" values={throughput(samples, key)} unit="/s" />
            </div>
            <p className="muted">Parked: {latest.points.get(key)?.dead ?? 0}</p>
          </li>
        ))}
      </ul>
    </section>
  );
}
