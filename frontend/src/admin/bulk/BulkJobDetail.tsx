// One bulk job in full: its options, columns and times (never its data).
import { bulkJob } from "../../api/bulkJobs";
import { ErrorState, Modal, Spinner } from "../../ui/components";
import { useAsync } from "../../screens/useAsync";
import { stamp } from "../shared";
import { BulkJobProgress } from "./BulkJobProgress";

export function BulkJobDetail({ id, onClose }: { id: string; onClose: () => void }) {
  const job = useAsync(() => bulkJob(id), [id]);
  const j = job.data;
  return (
    <Modal title={`Bulk job ${id}`} onClose={onClose}>
      {job.loading && !j && <Spinner />}
      {job.error && <ErrorState message={job.error} onRetry={job.reload} />}
      {j && (
        <>
          <BulkJobProgress job={j} />
          <dl className="receipt">
            {([
              ["State", j.state],
              ["Object", j.object],
              ["Operation", j.operation + (j.externalIdField ? ` on ${j.externalIdField}` : "")],
              ["Created by", j.createdBy ?? j.createdById],
              ["Created", stamp(j.createdAtMs)],
              ["Started", stamp(j.startedAtMs)],
              ["Finished", stamp(j.finishedAtMs)],
              ["Processing time", `${(j.processingMs / 1000).toFixed(1)} s`],
              ["Failed records", String(j.recordsFailed)],
              ["Chunks", `${j.chunksDone} / ${j.chunksTotal ?? "…"}`],
              ["Columns", j.columns.join(", ") || "—"],
              ["Uploaded", `${j.uploadedBytes} bytes`],
              ["CSV", `${j.columnDelimiter}, ${j.lineEnding}, API ${j.apiVersion}`],
              ["Error", j.errorMessage ?? "—"],
            ] as const).map(([label, value]) => (
              <div key={label}><dt>{label}</dt><dd>{value}</dd></div>
            ))}
          </dl>
        </>
      )}
    </Modal>
  );
}
