// One bulk job's progress: a bar of records processed of all there are, with the numbers.
import { percentDone, type BulkJob } from "../../api/bulkJobs";

export function BulkJobProgress({ job }: { job: BulkJob }) {
  const percent = percentDone(job);
  const total = job.recordsTotal === null ? "…" : String(job.recordsTotal);
  const text = `${job.recordsProcessed} / ${total} records`;
  return (
    <div className="bulk-progress">
      <div
        className="progress"
        role="progressbar"
        aria-label={`Progress of ${job.id}`}
        aria-valuemin={0}
        aria-valuemax={100}
        aria-valuenow={percent}
        aria-valuetext={text}
        style={{ minWidth: "8rem", margin: ".25rem 0" }}
      >
        <div className="progress-bar" style={{ width: `${percent}%` }} />
      </div>
      <span className="muted">{text}</span>
    </div>
  );
}
