// Catalog: installed Apps (digest, version, state), install a package file with the release's
// per-state progress (live while the job runs: the Catalog's status is polled for the newest
// job's state; then the job's journal), uninstall (a dependency refusal is shown as the server
// words it).
import { useState } from "react";
import { catalogStatus, installPackage, packageFiles, uninstallApp, type CatalogJob, type JobReport } from "../api/admin";
import { Button, EmptyState, ErrorState, Field, Spinner, Table, useToast } from "../ui/components";
import { errorText, useAsync } from "../screens/useAsync";

// The release state machine's states, in order (nexus/catalog/service.py STATES).
export const STATES = [
  "DRAFT", "VALIDATED", "RESERVED", "DDL_RECONCILED", "CATALOG_COMMITTED", "SNAPSHOT_PUBLISHED", "RUNTIME_PREPARED", "ACTIVE",
];
export const WATCH_MS = 300;

/** A running job as a report: every state up to its current one reached. */
export function runningReport(job: CatalogJob): JobReport {
  const at = STATES.indexOf(job.state);
  const reached = at < 0 ? [job.state] : STATES.slice(0, at + 1);
  return { ...job, steps: reached.map((state) => ({ state, detail: "" })) };
}

export function CatalogPanel() {
  const status = useAsync(catalogStatus, []);
  const [job, setJob] = useState<JobReport>();
  const [running, setRunning] = useState<string>();
  const [error, setError] = useState<string>();
  const toast = useToast();

  const run = async (what: string, action: () => Promise<JobReport>) => {
    setRunning(what);
    setError(undefined);
    setJob(undefined);
    // While the call runs, the newest job the Catalog reports (one newer than what was there)
    // is this one: its state ticks the progress list live.
    const before = status.data?.jobs?.[0]?.job_id;
    let watching = true;
    const watch = async () => {
      while (watching) {
        await new Promise((done) => setTimeout(done, WATCH_MS));
        try {
          const newest = (await catalogStatus()).jobs?.[0];
          if (watching && newest && newest.job_id !== before) setJob(runningReport(newest));
        } catch {
          // the call's own answer (or error) is what counts; the next poll may succeed
        }
      }
    };
    void watch();
    try {
      const done = await action();
      watching = false;
      setJob(done);
      if (done.state === "FAILED") setError(done.error ?? `${what} failed`);
      else toast(`${what}: ${done.app_id} ${done.state}`);
    } catch (e) {
      watching = false;
      setJob(undefined);
      setError(errorText(e));
    } finally {
      watching = false;
      setRunning(undefined);
      status.reload();
    }
  };

  const upload = async (file: File) => {
    try {
      const files = packageFiles(file.name, await file.text());
      await run(`Install ${file.name}`, () => installPackage(files));
    } catch (e) {
      setError(errorText(e));
    }
  };

  const apps = status.data?.apps ?? [];
  const states = status.data?.installations ?? {};
  return (
    <>
      <section className="card admin-section" aria-labelledby="apps-installed">
        <h2 id="apps-installed">Installed Apps</h2>
        {status.loading && !status.data && <Spinner />}
        {status.error && <ErrorState message={status.error} onRetry={status.reload} />}
        {status.data && !apps.length && <EmptyState title="No Apps installed" />}
        {!!apps.length && (
          <Table
            caption="Installed Apps"
            rows={apps.map((a) => ({ ...a, id: a.app_id }))}
            columns={[
              { key: "app", label: "App", render: (a) => a.app_id },
              { key: "version", label: "Version", render: (a) => a.version },
              { key: "state", label: "State", render: (a) => states[a.app_id] ?? a.state ?? "installed" },
              { key: "digest", label: "Release digest", render: (a) => <code title={a.digest}>{a.digest.slice(0, 19)}…</code> },
            ]}
            actions={(a) => (
              <Button variant="danger" disabled={!!running} aria-label={`Uninstall ${a.app_id}`} onClick={() => void run(`Uninstall ${a.app_id}`, () => uninstallApp(a.app_id))}>
                Uninstall
              </Button>
            )}
          />
        )}
        {status.data && <p className="muted">Active CatalogRevision {status.data.active_revision}</p>}
      </section>
      <section className="card admin-section" aria-labelledby="apps-install">
        <h2 id="apps-install">Install a package</h2>
        <Field id="pkg-file" label="Package file" hint="A package YAML file, or a JSON bundle of its files ({path: text}).">
          <input id="pkg-file" type="file" accept=".yaml,.yml,.json" disabled={!!running} onChange={(e) => { const f = e.target.files?.[0]; if (f) void upload(f); }} />
        </Field>
        {running && <Spinner label={`${running}…`} />}
        {error && <div className="state state-error" role="alert"><p className="state-title">Refused</p><p>{error}</p></div>}
        {job && <Progress job={job} />}
      </section>
    </>
  );
}

/** The release's states, each ticked when the job's journal reached it. */
export function Progress({ job }: { job: JobReport }) {
  const reached = new Set(job.steps.map((s) => s.state));
  const known = [...STATES, ...job.steps.map((s) => s.state).filter((s) => !STATES.includes(s))];
  return (
    <ol className="steps" aria-label={`${job.operation} of ${job.app_id}`}>
      {known.map((state) => {
        const step = job.steps.find((s) => s.state === state);
        return (
          <li key={state} className={state === "FAILED" ? "step-failed" : reached.has(state) ? "step-done" : "step-todo"}>
            <span aria-hidden="true">{state === "FAILED" ? "✗" : reached.has(state) ? "✓" : "○"}</span> {state}
            {step?.detail && <span className="muted"> — {step.detail}</span>}
          </li>
        );
      })}
    </ol>
  );
}
