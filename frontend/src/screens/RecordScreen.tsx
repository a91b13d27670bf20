import { useEffect, useState } from "react";
import { deleteRecord, objectInfo, recordPage } from "../api/crm";
import type { NavItem, ObjectInfo } from "../api/types";
import { displayValue } from "../fields/format";
import { LayoutRenderer } from "../layout/LayoutRenderer";
import { navigate, paths } from "../router";
import { Button, ErrorState, Link, Modal, Spinner, useToast } from "../ui/components";
import { forgetViewed, rememberViewed } from "./recent";
import { RecordForm } from "./RecordForm";
import { errorText, useAsync } from "./useAsync";

export function RecordScreen({ object, id, nav }: { object: string; id: string; nav: NavItem[] }) {
  const info = useAsync(() => objectInfo(object), [object]);
  if (info.error) return <ErrorState message={info.error} onRetry={info.reload} />;
  if (!info.data) return <Spinner />;
  return <RecordView info={info.data} id={id} nav={nav} />;
}

function RecordView({ info, id, nav }: { info: ObjectInfo; id: string; nav: NavItem[] }) {
  const toast = useToast();
  const record = useAsync(() => recordPage(id), [info.apiName, id]);
  const [editing, setEditing] = useState(false);
  const [confirming, setConfirming] = useState(false);
  const [adding, setAdding] = useState<{ object: ObjectInfo; field: string } | null>(null);
  const opened = record.data?.record;
  useEffect(() => {
    if (opened) {
      const name = String(opened.fields[info.nameField] ?? opened.id);
      rememberViewed({ object: info.apiName, objectLabel: info.label, id: opened.id, name });
    }
  }, [opened, info]);

  if (record.error) {
    return (
      <ErrorState message={record.error} onRetry={record.reload} />
    );
  }
  if (!record.data) return <Spinner />;
  const { record: data, sections, relatedLists, history } = record.data;
  const name = String(data.fields[info.nameField] ?? data.id);

  const addRelated = async (childObject: string, field: string) => {
    try {
      setAdding({ object: await objectInfo(childObject), field });
    } catch (error) {
      toast(errorText(error), "error");
    }
  };

  return (
    <article aria-labelledby="record-title">
      <div className="page-header">
        <div>
          <p className="eyebrow"><Link href={paths.list(info.apiName)}>{info.labelPlural}</Link></p>
          <h1 id="record-title">{name}</h1>
        </div>
        <div className="actions">
          {data.access.editable && <Button variant="primary" onClick={() => setEditing(true)}>Edit</Button>}
          {data.access.deletable && <Button variant="danger" onClick={() => setConfirming(true)}>Delete</Button>}
        </div>
      </div>
      <div className="record-body">
        <div className="card">
          <LayoutRenderer mode="view" info={info} sections={sections} values={data.fields} lookups={data.lookups} />
        </div>
        <aside className="related" aria-label="Related lists">
          {relatedLists.map((list) => {
            const child = nav.find((n) => n.objectApiName === list.childObjectApiName);
            if (!child) return null;
            const headingId = `related-${list.childObjectApiName}-${list.fieldName}`;
            return (
              <section key={headingId} className="card related-list" aria-labelledby={headingId}>
                <header>
                  <h2 id={headingId}>{child.labelPlural} <span className="count">({list.records.length}{list.hasMore ? "+" : ""})</span></h2>
                  {child.createable && (
                    <Button aria-label={`New ${child.label}`} onClick={() => void addRelated(list.childObjectApiName, list.fieldName)}>New</Button>
                  )}
                </header>
                {list.records.length === 0 ? (
                  <p className="muted">None yet</p>
                ) : (
                  <ul>
                    {list.records.map((r) => (
                      <li key={r.id}><Link href={paths.record(list.childObjectApiName, r.id)}>{r.name}</Link></li>
                    ))}
                  </ul>
                )}
              </section>
            );
          })}
          {history.length > 0 && (
            <section className="card related-list" aria-labelledby="history-title">
              <header><h2 id="history-title">Field history</h2></header>
              <ul className="history">
                {history.map((h, i) => {
                  const f = info.fields[h.field];
                  const show = (v: typeof h.oldValue) => (f ? displayValue(f, v) : String(v ?? "")) || "—";
                  return (
                    <li key={i}>
                      <strong>{f?.label ?? h.field}</strong>: {show(h.oldValue)} → {show(h.newValue)}
                    </li>
                  );
                })}
              </ul>
            </section>
          )}
        </aside>
      </div>
      {editing && (
        <RecordForm
          info={info}
          record={data}
          onClose={() => setEditing(false)}
          onSaved={() => {
            setEditing(false);
            toast(`${info.label} saved`);
            record.reload();
          }}
        />
      )}
      {adding && (
        <RecordForm
          info={adding.object}
          defaults={{ [adding.field]: data.id }}
          defaultNames={{ [adding.field]: name }}
          onClose={() => setAdding(null)}
          onSaved={() => {
            toast(`${adding.object.label} created`);
            setAdding(null);
            record.reload();
          }}
        />
      )}
      {confirming && (
        <Modal
          title={`Delete ${info.label}?`}
          onClose={() => setConfirming(false)}
          footer={
            <>
              <Button onClick={() => setConfirming(false)}>Cancel</Button>
              <Button
                variant="danger"
                onClick={() =>
                  deleteRecord(info.apiName, data.id).then(
                    () => {
                      forgetViewed(data.id);
                      toast(`${info.label} "${name}" deleted`);
                      navigate(paths.list(info.apiName));
                    },
                    (error) => {
                      setConfirming(false);
                      toast(errorText(error), "error");
                    },
                  )
                }
              >
                Delete
              </Button>
            </>
          }
        >
          <p>“{name}” will be deleted.</p>
        </Modal>
      )}
    </article>
  );
}
