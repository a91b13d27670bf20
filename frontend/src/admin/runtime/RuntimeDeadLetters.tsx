// The Runtime's inbox/outbox dead letters, with replay.
import { useState } from "react";
import { replayRuntime, runtimeDeadLetters } from "../../api/admin";
import { Button, EmptyState, ErrorState, Spinner, Table, useToast } from "../../ui/components";
import { errorText, useAsync } from "../../screens/useAsync";
import { stamp } from "../shared";

export function RuntimeDeadLetters() {
  const [queue, setQueue] = useState<"inbox" | "outbox">("inbox");
  const list = useAsync(() => runtimeDeadLetters(queue), [queue]);
  const toast = useToast();
  const replay = async (ids: string[]) => {
    try {
      const done = await replayRuntime(queue, ids);
      const refused = Object.entries(done.refused);
      toast(`Replayed ${done.replayed.length}` + (refused.length ? `, refused ${refused.map(([i, why]) => `${i}: ${why}`).join("; ")}` : ""), refused.length ? "error" : "success");
      list.reload();
    } catch (e) {
      toast(errorText(e), "error");
    }
  };
  return (
    <section className="card admin-section" aria-labelledby="rdl-title">
      <div className="section-header">
        <h2 id="rdl-title">Runtime dead letters</h2>
        <label htmlFor="rdl-queue" className="inline-label">Queue</label>
        <select id="rdl-queue" value={queue} onChange={(e) => setQueue(e.target.value as "inbox" | "outbox")}>
          <option value="inbox">Inbox (commands)</option>
          <option value="outbox">Outbox (after-save actions)</option>
        </select>
      </div>
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && !list.data.length && <EmptyState title={`No dead letters in the ${queue}`} />}
      {!!list.data?.length && (
        <>
          <Table
            caption="Runtime dead letters"
            rows={list.data}
            columns={[
              { key: "class", label: "Queue class", render: (d) => d.queueClass },
              { key: "failure", label: "Failure", render: (d) => `${d.failureClass ?? d.state}: ${d.error ?? "—"}` },
              { key: "attempts", label: "Attempts", render: (d) => d.attempts },
              { key: "at", label: "Parked at", render: (d) => stamp(d.deadAtMs) },
            ]}
            actions={(d) => <Button aria-label={`Replay ${d.id}`} onClick={() => void replay([d.id])}>Replay</Button>}
          />
          <Button onClick={() => void replay(list.data!.map((d) => d.id))}>Replay all shown</Button>
        </>
      )}
    </section>
  );
}
