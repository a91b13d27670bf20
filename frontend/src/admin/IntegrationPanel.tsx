// Integration operations: live queue charts, the dead-letter list with filters and replay
// (one, selected, all since T; refusals show their fail-closed reason), halted lanes with
// skip/replay, and the receipt audit of a delivery id.
import { useEffect, useId, useRef, useState } from "react";
import {
  deadLetters, queues, receipts, refusals, replayItems, replaySince, skipLane, summarize, throughput,
  type ActionReport, type DeadLetter, type DeadLetterFilter, type Sample,
} from "../api/admin";
import { Button, EmptyState, ErrorState, Field, Spinner, Table, useToast } from "../ui/components";
import { errorText, useAsync } from "../screens/useAsync";
import { Sparkline } from "./Sparkline";
import { stamp } from "./AdminScreen";

const REFRESH_MS = 3000;
const KEEP = 30;

export function IntegrationPanel() {
  const [changed, setChanged] = useState(0);
  return (
    <>
      <QueueCharts />
      <DeadLetters halted={false} changed={changed} onChange={() => setChanged((n) => n + 1)} />
      <DeadLetters halted changed={changed} onChange={() => setChanged((n) => n + 1)} />
      <ReceiptSearch />
    </>
  );
}

function QueueCharts() {
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

function DeadLetters({ halted, changed, onChange }: { halted: boolean; changed: number; onChange: () => void }) {
  const [filter, setFilter] = useState<DeadLetterFilter>({});
  const [applied, setApplied] = useState<DeadLetterFilter>({});
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [report, setReport] = useState<string[]>([]);
  const [since, setSince] = useState("");
  const [busy, setBusy] = useState(false);
  const toast = useToast();
  const id = useId();
  const list = useAsync(() => deadLetters(halted ? {} : applied, halted), [JSON.stringify(applied), changed]);
  const title = halted ? "Halted lanes" : "Dead letters";

  const act = async (run: () => Promise<ActionReport>, what: string) => {
    setBusy(true);
    try {
      const done = await run();
      setReport(refusals(done));
      setSelected(new Set());
      toast(`${what}: ${done.done} done, ${done.refused} refused`, done.refused ? "error" : "success");
      onChange();
    } catch (error) {
      setReport([errorText(error)]);
    } finally {
      setBusy(false);
    }
  };
  const items = list.data?.items ?? [];
  const rows = items.map((d) => ({ ...d, id: d.work_id }));
  const toggle = (workId: string) =>
    setSelected((s) => { const next = new Set(s); if (next.has(workId)) next.delete(workId); else next.add(workId); return next; });

  return (
    <section className="card admin-section" aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>{title}</h2>
      {!halted && (
        <form
          className="filters"
          aria-label="Dead letter filters"
          onSubmit={(e) => { e.preventDefault(); setApplied(filter); }}
        >
          {(["connector", "route", "pack", "failure_class"] as const).map((key) => (
            <Field key={key} id={`${id}-${key}`} label={key === "failure_class" ? "Failure class" : key[0].toUpperCase() + key.slice(1)}>
              <input id={`${id}-${key}`} value={filter[key] ?? ""} onChange={(e) => setFilter({ ...filter, [key]: e.target.value })} />
            </Field>
          ))}
          <Button type="submit">Filter</Button>
        </form>
      )}
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && !items.length && <EmptyState title={halted ? "No halted lanes" : "No dead letters"} />}
      {!!items.length && (
        <Table
          caption={title}
          rows={rows}
          columns={[
            ...(halted ? [] : [{
              key: "pick", label: "Select",
              render: (d: DeadLetter) => (
                <input type="checkbox" aria-label={`Select ${d.work_id}`} checked={selected.has(d.work_id)} onChange={() => toggle(d.work_id)} />
              ),
            }]),
            { key: "route", label: "Route", render: (d) => `${d.event.connector}/${d.event.route} v${d.event.route_version}` },
            { key: "delivery", label: "Delivery", render: (d) => d.receipt?.delivery_id ?? "—" },
            { key: "event", label: "Event", render: (d) => `${d.event.event_kind ?? "—"} ${d.event.source_object_id ?? ""}` },
            { key: "failure", label: "Failure", render: (d) => <span className="failure">{d.failure_class ?? d.state}: {d.error ?? "—"}</span> },
            { key: "attempts", label: "Attempts", render: (d) => `${d.attempt}/${d.max_attempts}` },
            { key: "at", label: "Failed at", render: (d) => stamp(d.failed_at) },
          ]}
          actions={(d) => (
            <>
              <Button disabled={busy} aria-label={`Replay ${d.work_id}`} onClick={() => void act(() => replayItems([d.work_id]), "Replay")}>Replay</Button>
              {halted && (
                <Button disabled={busy} aria-label={`Skip ${d.work_id}`} onClick={() => void act(() => skipLane(d.work_id), "Skip")}>Skip</Button>
              )}
            </>
          )}
        />
      )}
      {!halted && (
        <div className="actions">
          <Button variant="primary" disabled={busy || !selected.size} onClick={() => void act(() => replayItems([...selected]), "Replay")}>
            Replay selected ({selected.size})
          </Button>
          <label htmlFor={`${id}-since`} className="inline-label">Parked since</label>
          <input id={`${id}-since`} type="datetime-local" value={since} onChange={(e) => setSince(e.target.value)} />
          <Button
            disabled={busy || !since}
            onClick={() => void act(() => replaySince(new Date(since).toISOString(), applied), "Replay all since")}
          >
            Replay all since
          </Button>
        </div>
      )}
      {!!report.length && (
        <div className="refusals" role="alert">
          <p className="state-title">Refused (nothing was replayed for these)</p>
          <ul>{report.map((line) => <li key={line}>{line}</li>)}</ul>
        </div>
      )}
    </section>
  );
}

function ReceiptSearch() {
  const [delivery, setDelivery] = useState("");
  const [found, setFound] = useState<Array<Record<string, unknown>>>();
  const [error, setError] = useState<string>();
  const input = useRef<HTMLInputElement>(null);
  return (
    <section className="card admin-section" aria-labelledby="receipts-title">
      <h2 id="receipts-title">Receipts</h2>
      <form
        className="filters"
        role="search"
        aria-label="Receipts"
        onSubmit={(e) => {
          e.preventDefault();
          setError(undefined);
          receipts(delivery.trim()).then((r) => setFound(r.receipts), (err: unknown) => setError(errorText(err)));
        }}
      >
        <Field id="receipt-delivery" label="Delivery id">
          <input id="receipt-delivery" ref={input} value={delivery} required onChange={(e) => setDelivery(e.target.value)} />
        </Field>
        <Button type="submit">Find</Button>
      </form>
      {error && <ErrorState message={error} />}
      {found && !found.length && <EmptyState title="No receipt with this delivery id" />}
      {found?.map((r) => (
        <dl key={String(r.receipt_id)} className="receipt">
          {Object.entries(r).map(([k, v]) => (
            <div key={k}><dt>{k}</dt><dd>{typeof v === "object" ? JSON.stringify(v) : String(v)}</dd></div>
          ))}
        </dl>
      ))}
    </section>
  );
}
