// `/admin`: the System Administrator's console. The servers decide who may use it; a 403 from
// them is shown as a clear "not allowed" state, never as an error page.
import { useEffect, useState } from "react";
import { ApiError } from "../api/http";
import { users } from "../api/admin";
import { EmptyState, Link, Spinner } from "../ui/components";
import { BulkJobsPanel } from "./BulkJobsPanel";
import { CatalogPanel } from "./CatalogPanel";
import { IntegrationPanel } from "./IntegrationPanel";
import { MetadataPanel } from "./MetadataPanel";
import { RuntimePanel } from "./RuntimePanel";

export const SECTIONS = [
  { key: "integration", label: "Integration" },
  { key: "runtime", label: "Users & access" },
  { key: "bulk", label: "Bulk jobs" },
  { key: "catalog", label: "Apps" },
  { key: "metadata", label: "Metadata" },
] as const;

export type Section = (typeof SECTIONS)[number]["key"];

export function AdminScreen({ section }: { section: string }) {
  const [access, setAccess] = useState<"checking" | "allowed" | "forbidden" | "error">("checking");
  useEffect(() => {
    // one cheap admin read: the server answers 403 to anyone but a System Administrator
    users().then(
      () => setAccess("allowed"),
      (error: unknown) => setAccess(error instanceof ApiError && error.status === 403 ? "forbidden" : "error"),
    );
  }, []);
  if (access === "checking") return <Spinner label="Checking access…" />;
  if (access === "forbidden") return <NotAllowed />;
  const current = SECTIONS.find((s) => s.key === section) ?? SECTIONS[0];
  return (
    <div className="admin">
      <header className="page-header">
        <div>
          <p className="eyebrow">Administration</p>
          <h1>{current.label}</h1>
        </div>
      </header>
      <nav className="admin-tabs" aria-label="Administration">
        <ul>
          {SECTIONS.map((s) => (
            <li key={s.key}>
              <Link href={`/admin/${s.key}`} aria-current={s.key === current.key ? "page" : undefined}>{s.label}</Link>
            </li>
          ))}
        </ul>
      </nav>
      {current.key === "integration" && <IntegrationPanel />}
      {current.key === "runtime" && <RuntimePanel />}
      {current.key === "bulk" && <BulkJobsPanel />}
      {current.key === "catalog" && <CatalogPanel />}
      {current.key === "metadata" && <MetadataPanel />}
    </div>
  );
}

export function NotAllowed() {
  return (
    <EmptyState title="You are not allowed to use the admin console">
      <p>Only a System Administrator can open it. Ask one if you need access.</p>
      <Link href="/">Back to the CRM</Link>
    </EmptyState>
  );
}
