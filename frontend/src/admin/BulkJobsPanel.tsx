// Bulk API jobs of the org (Runtime decides: System Administrator only), newest first: each
// job's state, progress bar (records processed of all there are), chunks and failures, filters,
// "Load more" by cursor, a detail dialog, and Abort for a job whose work has not ended. The list
// refreshes itself while any job shown is still running, and stops once they all ended.
import { useCallback, useEffect, useRef, useState } from "react";
import { abortBulkJob, bulkJobs, running, type BulkJob, type BulkJobFilter, type BulkJobPage } from "../api/bulkJobs";
import { SessionExpired } from "../api/http";
import { Button, EmptyState, ErrorState, Spinner, Table } from "../ui/components";
import { errorText } from "../screens/useAsync";
import { stamp, useAction } from "./shared";
import { BulkJobDetail } from "./bulk/BulkJobDetail";
import { BulkJobFilters } from "./bulk/BulkJobFilters";
import { BulkJobProgress } from "./bulk/BulkJobProgress";

export const REFRESH_MS = 2000;
const PAGE = 50;
const MAX_PAGE = 200; // the server's largest page: a refresh reloads at most this many

export function BulkJobsPanel() {
  const [filter, setFilter] = useState<BulkJobFilter>({});
  const [page, setPage] = useState<BulkJobPage>();
  const [error, setError] = useState<string>();
  const [tick, setTick] = useState(0);
  const [answers, setAnswers] = useState(0); // each answer (or failure) of the list
  const [shown, setShown] = useState<string | null>(null);
  const size = useRef(PAGE); // jobs on screen: a refresh reloads them all, not only the first page
  const reload = useCallback(() => setTick((t) => t + 1), []);
  const act = useAction(reload);

  useEffect(() => {
    let live = true;
    bulkJobs(filter, { limit: Math.min(MAX_PAGE, Math.max(PAGE, size.current)) }).then(
      (loaded) => {
        if (!live) return;
        setPage(loaded);
        setError(undefined);
        setAnswers((n) => n + 1);
      },
      (e: unknown) => {
        if (!live || e instanceof SessionExpired) return;
        setError(errorText(e));
        setAnswers((n) => n + 1);
      },
    );
    return () => {
      live = false;
    };
  }, [filter, tick]);

  const active = !!page?.jobs.some(running);
  useEffect(() => {
    if (!active) return;
    const timer = window.setTimeout(reload, REFRESH_MS); // after each answer: never two in flight
    return () => window.clearTimeout(timer);
  }, [active, answers, reload]);

  const apply = (next: BulkJobFilter) => {
    size.current = PAGE;
    setPage(undefined);
    setFilter(next);
  };
  const more = async () => {
    if (!page?.nextCursor) return;
    try {
      const next = await bulkJobs(filter, { cursor: page.nextCursor, limit: PAGE });
      setPage((current) => {
        const jobs = current ? current.jobs : [];
        const seen = new Set(jobs.map((j) => j.id));
        const merged = [...jobs, ...next.jobs.filter((j) => !seen.has(j.id))];
        size.current = merged.length;
        return { jobs: merged, nextCursor: next.nextCursor };
      });
    } catch (e) {
      setError(errorText(e));
    }
  };

  return (
    <section className="card admin-section" aria-labelledby="bulk-title">
      <div className="section-header">
        <h2 id="bulk-title">Bulk API jobs</h2>
        {active && <span className="muted" role="status">Refreshing every {REFRESH_MS / 1000} s while jobs run</span>}
      </div>
      <BulkJobFilters onApply={apply} />
      {error && <ErrorState message={error} onRetry={reload} />}
      {!page && !error && <Spinner label="Loading bulk jobs…" />}
      {page && !page.jobs.length && <EmptyState title="No bulk jobs">Jobs made with the Bulk API appear here.</EmptyState>}
      {!!page?.jobs.length && (
        <Table<BulkJob>
          caption="Bulk API jobs"
          rows={page.jobs}
          columns={[
            { key: "id", label: "Job", render: (j) => <code>{j.id}</code> },
            { key: "object", label: "Object", render: (j) => j.object },
            { key: "operation", label: "Operation", render: (j) => j.operation },
            { key: "state", label: "State", render: (j) => <span data-state={j.state}>{j.state}</span> },
            { key: "progress", label: "Progress", render: (j) => <BulkJobProgress job={j} /> },
            { key: "chunks", label: "Chunks", render: (j) => `${j.chunksDone} / ${j.chunksTotal ?? "…"}` },
            { key: "failed", label: "Failed", render: (j) => failures(j) },
            { key: "by", label: "Created by", render: (j) => j.createdBy ?? j.createdById },
            { key: "created", label: "Created", render: (j) => stamp(j.createdAtMs) },
            { key: "finished", label: "Finished", render: (j) => stamp(j.finishedAtMs) },
          ]}
          actions={(j) => (
            <>
              <Button aria-label={`Details of ${j.id}`} onClick={() => setShown(j.id)}>Details</Button>
              {j.abortable && (
                <Button variant="danger" aria-label={`Abort ${j.id}`} onClick={() => void act(() => abortBulkJob(j.id), `Job ${j.id} aborted`)}>
                  Abort
                </Button>
              )}
            </>
          )}
        />
      )}
      {page?.nextCursor && <Button onClick={() => void more()}>Load more</Button>}
      {shown && <BulkJobDetail id={shown} onClose={() => setShown(null)} />}
    </section>
  );
}

function failures(job: BulkJob): string {
  const count = job.recordsFailed ? `${job.recordsFailed} records` : "0";
  return job.errorMessage ? `${count}; ${job.errorMessage}` : count;
}
