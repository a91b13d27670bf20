// Dead letters (with filters, replay one / selected / all since T, re-route) or, with `halted`,
// halted lanes (replay, skip).
import { useId, useState } from "react";
import {
  deadLetters, refusals, replayItems, replaySince, reroutable, rerouteItems, skipLane,
  type ActionReport, type DeadLetter, type DeadLetterFilter,
} from "../../api/admin";
import { Button, EmptyState, ErrorState, Spinner, Table } from "../../ui/components";
import { useAsync } from "../../screens/useAsync";
import { stamp, useReplay } from "../shared";
import { Filters } from "./Filters";
import { Refusals } from "./Refusals";

export function DeadLetters({ halted, changed, onChange }: { halted: boolean; changed: number; onChange: () => void }) {
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
        <Filters
          label="Dead letter filters"
          keys={["connector", "route", "pack", "failure_class"] as const}
          names={{ failure_class: "Failure class" }}
          onApply={setApplied}
        />
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
