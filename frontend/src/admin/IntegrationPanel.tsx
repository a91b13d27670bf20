// Integration operations: live queue charts, the dead-letter list with filters and replay
// (one, selected, all since T; refusals show their fail-closed reason), failed deliveries
// (receipts whose mapping failed: fix the route, replay them through it), halted lanes with
// skip/replay, and the receipt audit of a delivery id.
import { useEffect, useId, useRef, useState } from "react";
import {
  deadLetters, failedReceipts, queues, receiptRefusals, receipts, refusals, replayItems, replayReceipts,
  replayReceiptsSince, replaySince, reroutable, rerouteItems, skipLane, summarize, throughput,
  type ActionReport, type DeadLetter, type DeadLetterFilter, type FailedReceipt, type FailedReceiptFilter,
  type ReceiptReport, type Sample,
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
      <FailedDeliveries changed={changed} onChange={() => setChanged((n) => n + 1)} />
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
  const [since, setSince] = useState("");
  const id = useId();
  const list = useAsync(() => deadLetters(halted ? {} : applied, halted), [JSON.stringify(applied), changed]);
  const title = halted ? "Halted lanes" : "Dead letters";
  const { act, busy, report, selected, toggle } = useReplay<ActionReport>(
    (done) => [refusals(done), `${done.done} done, ${done.refused} refused`], onChange,
  );
  const items = list.data?.items ?? [];
  const rows = items.map((d) => ({ ...d, id: d.work_id }));

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
              {reroutable(d) && (
                <Button
                  disabled={busy}
                  aria-label={`Re-route ${d.work_id}`}
                  title="Cancel this item and route its delivery again with the route's current version"
                  onClick={() => void act(() => rerouteItems([d.work_id]), "Re-route")}
                >
                  Re-route
                </Button>
              )}
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
      <Refusals lines={report} />
    </section>
  );
}

function FailedDeliveries({ changed, onChange }: { changed: number; onChange: () => void }) {
  const [filter, setFilter] = useState<FailedReceiptFilter>({});
  const [applied, setApplied] = useState<FailedReceiptFilter>({});
  const [since, setSince] = useState("");
  const id = useId();
  const list = useAsync(() => failedReceipts(applied), [JSON.stringify(applied), changed]);
  const items = list.data?.items ?? [];
  const deliveries = new Map(items.map((r) => [r.receipt_id, r.delivery_id]));
  const { act, busy, report, selected, toggle } = useReplay<ReceiptReport>(
    (done) => [receiptRefusals(done, deliveries), `${done.done} routed again, ${done.refused} refused`], onChange,
  );

  return (
    <section className="card admin-section" aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>Failed deliveries</h2>
      <p className="muted">
        Webhooks the route could not map: nothing was created from them. Fix the route, then replay:
        they are mapped again with the route&apos;s current version.
      </p>
      <form
        className="filters"
        aria-label="Failed delivery filters"
        onSubmit={(e) => { e.preventDefault(); setApplied(filter); }}
      >
        {(["connector", "route", "delivery_id"] as const).map((key) => (
          <Field key={key} id={`${id}-${key}`} label={key === "delivery_id" ? "Delivery id" : key[0].toUpperCase() + key.slice(1)}>
            <input id={`${id}-${key}`} value={filter[key] ?? ""} onChange={(e) => setFilter({ ...filter, [key]: e.target.value })} />
          </Field>
        ))}
        <Button type="submit">Filter</Button>
      </form>
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && !items.length && <EmptyState title="No failed deliveries" />}
      {!!items.length && (
        <Table
          caption="Failed deliveries"
          rows={items.map((r) => ({ ...r, id: r.receipt_id }))}
          columns={[
            {
              key: "pick", label: "Select",
              render: (r: FailedReceipt) => (
                <input type="checkbox" aria-label={`Select delivery ${r.delivery_id}`} checked={selected.has(r.receipt_id)} onChange={() => toggle(r.receipt_id)} />
              ),
            },
            { key: "delivery", label: "Delivery", render: (r) => r.delivery_id },
            { key: "route", label: "Route", render: (r) => `${r.connector}/${r.route}` },
            { key: "kind", label: "Event", render: (r) => r.event_kind ?? "—" },
            { key: "failure", label: "Failure", render: (r) => <span className="failure">{r.error ?? "—"}</span> },
            { key: "attempts", label: "Attempts", render: (r) => String(r.attempts) },
            { key: "received", label: "Received", render: (r) => stamp(r.received_at) },
            { key: "failed", label: "Failed at", render: (r) => stamp(r.failed_at) },
          ]}
          actions={(r) => (
            <Button disabled={busy} aria-label={`Replay delivery ${r.delivery_id}`} onClick={() => void act(() => replayReceipts([r.receipt_id]), "Replay delivery")}>
              Replay
            </Button>
          )}
        />
      )}
      <div className="actions">
        <Button variant="primary" disabled={busy || !selected.size} onClick={() => void act(() => replayReceipts([...selected]), "Replay deliveries")}>
          Replay selected deliveries ({selected.size})
        </Button>
        <label htmlFor={`${id}-since`} className="inline-label">Failed since</label>
        <input id={`${id}-since`} type="datetime-local" value={since} onChange={(e) => setSince(e.target.value)} />
        <Button
          disabled={busy || !since}
          onClick={() => void act(() => replayReceiptsSince(new Date(since).toISOString(), applied), "Replay failed deliveries since")}
        >
          Replay all failed since
        </Button>
      </div>
      <Refusals lines={report} />
    </section>
  );
}

/** Run a replay, toast its summary, keep its refusal lines, clear the selection, refresh. */
function useReplay<R extends { refused: number }>(outcome: (report: R) => [string[], string], onChange: () => void) {
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

function Refusals({ lines }: { lines: string[] }) {
  if (!lines.length) return null;
  return (
    <div className="refusals" role="alert">
      <p className="state-title">Refused (nothing was replayed for these)</p>
      <ul>{lines.map((line) => <li key={line}>{line}</li>)}</ul>
    </div>
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
