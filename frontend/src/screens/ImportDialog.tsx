import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import {
  autoMatch, finished, importableFields, importErrors, importStatus, mappingProblem, parseCsv,
  saveFile, startImport, type ImportJob, type ImportOperation, type Mapping,
} from "../api/imports";
import { ApiError } from "../api/http";
import type { ObjectInfo } from "../api/types";
import { Button, ErrorState, Modal, useToast } from "../ui/components";
import { ColumnMapping } from "./ColumnMapping";
import { errorText } from "./useAsync";

// a job of 1,000 rows can finish in well under a second: poll often enough to show its steps
const POLL_MS = 200;
const MAX_BYTES = 7 * 1024 * 1024;

interface Upload { name: string; text: string; headers: string[]; samples: string[] }

/** Upload a CSV for one object, map its columns, run the import as a job and watch it. */
export function ImportDialog({ info, onClose, onDone }: { info: ObjectInfo; onClose: () => void; onDone: () => void }) {
  const toast = useToast();
  const [upload, setUpload] = useState<Upload | null>(null);
  const [operation, setOperation] = useState<ImportOperation>("insert");
  const [externalId, setExternalId] = useState<string | null>(null);
  const [mapping, setMapping] = useState<Mapping>({});
  const [job, setJob] = useState<ImportJob | null>(null);
  const [error, setError] = useState<string>();
  const [columnErrors, setColumnErrors] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState(false);

  const all = useMemo(() => info.fieldOrder.map((n) => info.fields[n]), [info]);
  const fields = useMemo(() => importableFields(all, operation), [all, operation]);
  const externalIds = all.filter((f) => f.externalId && (f.createable || f.updateable));
  const problem = upload ? mappingProblem(mapping, fields, operation, externalId) : "Choose a CSV file.";

  useEffect(() => {
    if (!job || finished(job)) {
      if (job && finished(job)) onDone();
      return;
    }
    const timer = setTimeout(
      () => importStatus(job.id).then(setJob, (e) => setError(errorText(e))),
      POLL_MS,
    );
    return () => clearTimeout(timer);
    // eslint-disable-next-line react-hooks/exhaustive-deps -- driven by `job` only: a new `onDone` identity must not call onDone again for an already finished job
  }, [job]);

  const choose = async (file: File | undefined) => {
    setError(undefined);
    if (!file) return;
    if (file.size > MAX_BYTES) return setError("The file is larger than 7 MB. Split it into smaller files.");
    const text = await file.text();
    const [headers = [], samples = []] = parseCsv(text, 2);
    if (!headers.some((h) => h.trim())) return setError("The file has no header row.");
    setUpload({ name: file.name, text, headers, samples });
    setMapping(autoMatch(headers, fields));
  };

  const start = async () => {
    if (!upload || problem) return;
    setBusy(true);
    setError(undefined);
    setColumnErrors({});
    try {
      setJob(
        await startImport({
          objectApiName: info.apiName,
          operation,
          externalIdFieldName: operation === "upsert" ? externalId : null,
          mapping,
          csv: upload.text,
        }),
      );
    } catch (e) {
      setError(errorText(e));
      if (e instanceof ApiError) setColumnErrors(e.fieldErrors);
    } finally {
      setBusy(false);
    }
  };

  const running = job && !finished(job);
  const closable = useRef({ running, onClose });
  closable.current = { running, onClose };
  // one stable handler: the modal keeps focus where it is while progress re-renders
  const close = useCallback(() => !closable.current.running && closable.current.onClose(), []);
  const footer = job ? (
    <Button variant="primary" onClick={close} disabled={Boolean(running)}>
      {running ? "Importing…" : "Close"}
    </Button>
  ) : (
    <>
      <Button onClick={close}>Cancel</Button>
      <Button variant="primary" disabled={Boolean(problem) || busy} onClick={() => void start()}>
        Start import
      </Button>
    </>
  );

  return (
    <Modal title={`Import ${info.labelPlural}`} onClose={close} footer={footer}>
      {error && <ErrorState message={error} />}
      {!job && (
        <div className="import-setup">
          <div className="field">
            <label className="field-label" htmlFor="import-file">CSV file</label>
            <input id="import-file" type="file" accept=".csv,text/csv" onChange={(e) => void choose(e.target.files?.[0])} />
            <p className="field-hint">The first row names the columns. Up to 7 MB.</p>
          </div>
          <fieldset className="field import-operation">
            <legend className="field-label">What to do with each row</legend>
            <label><input type="radio" name="operation" checked={operation === "insert"} onChange={() => setOperation("insert")} /> Insert new records</label>
            <label>
              <input type="radio" name="operation" checked={operation === "upsert"} disabled={!externalIds.length}
                onChange={() => { setOperation("upsert"); setExternalId(externalId ?? externalIds[0]?.apiName ?? null); }} />
              {" "}Update or insert, matched by an external id{externalIds.length ? "" : " (this object has none)"}
            </label>
          </fieldset>
          {operation === "upsert" && (
            <div className="field">
              <label className="field-label" htmlFor="import-external-id">External id field</label>
              <select id="import-external-id" value={externalId ?? ""} onChange={(e) => setExternalId(e.target.value || null)}>
                {externalIds.map((f) => <option key={f.apiName} value={f.apiName}>{f.label}</option>)}
              </select>
            </div>
          )}
          {upload && (
            <>
              <h3 className="import-heading">Columns of {upload.name}</h3>
              <ColumnMapping headers={upload.headers} samples={upload.samples} fields={fields} mapping={mapping}
                onChange={setMapping} errors={columnErrors} />
            </>
          )}
          {upload && problem && <p className="field-hint import-problem">{problem}</p>}
        </div>
      )}
      {job && <ImportProgress job={job} onErrors={() => importErrors(job.id).then(
        (file) => saveFile(file, `${info.apiName}-import-errors.csv`),
        (e) => toast(errorText(e), "error"),
      )} />}
    </Modal>
  );
}

export function ImportProgress({ job, onErrors }: { job: ImportJob; onErrors: () => void }) {
  const percent = job.total ? Math.round((100 * job.processed) / job.total) : finished(job) ? 100 : 0;
  return (
    <div className="import-progress">
      <p className="import-status" aria-live="polite">
        {job.state === "queued" && "Waiting to start…"}
        {job.state === "running" && `Importing: ${job.processed} of ${job.total} rows`}
        {job.state === "done" && `Import finished: ${job.succeeded} imported, ${job.failed} failed`}
        {job.state === "failed" && `The import stopped: ${job.error ?? "unknown error"}`}
      </p>
      <div className="progress" role="progressbar" aria-label="Import progress" aria-valuemin={0} aria-valuemax={100} aria-valuenow={percent}>
        <div className="progress-bar" style={{ width: `${percent}%` }} />
      </div>
      <dl className="import-counts">
        <div><dt>Rows</dt><dd>{job.total}</dd></div>
        <div><dt>Imported</dt><dd data-count="succeeded">{job.succeeded}</dd></div>
        <div><dt>Failed</dt><dd data-count="failed">{job.failed}</dd></div>
      </dl>
      {job.failed > 0 && finished(job) && (
        <Button onClick={onErrors}>Download error report ({job.failed} rows)</Button>
      )}
    </div>
  );
}
