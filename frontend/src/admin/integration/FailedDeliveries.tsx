// Failed deliveries: receipts whose mapping failed; fix the route, replay them through it.
import { useId, useState } from "react";
import {
  failedReceipts, receiptRefusals, replayReceipts, replayReceiptsSince,
  type FailedReceipt, type FailedReceiptFilter, type ReceiptReport,
} from "../../api/admin";
import { Button, EmptyState, ErrorState, Spinner, Table } from "../../ui/components";
import { useAsync } from "../../screens/useAsync";
import { stamp, useReplay } from "../shared";
import { Filters } from "./Filters";
import { Refusals } from "./Refusals";

export function FailedDeliveries({ changed, onChange }: { changed: number; onChange: () => void }) {
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
      <Filters
        label="Failed delivery filters"
        keys={["connector", "route", "delivery_id"] as const}
        names={{ delivery_id: "Delivery id" }}
        onApply={setApplied}
      />
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
