import { useState } from "react";
import { deletedRecords, undeleteRecord, RECYCLE_BIN_SIZE } from "../api/recycle";
import type { FieldInfo, ObjectInfo } from "../api/types";
import { displayValue } from "../fields/format";
import { Button, EmptyState, ErrorState, Modal, Spinner, useToast } from "../ui/components";
import { errorText, useAsync } from "./useAsync";

const DELETED_ON: FieldInfo = {
  apiName: "LastModifiedDate", label: "Deleted", dataType: "DateTime", required: false, createable: false,
  updateable: false, nameField: false, calculated: true, length: 0, scale: 0, picklistValues: [], referenceTo: [],
  relationshipName: null, system: true,
};

/** The object's deleted records (newest first) with Restore on each. */
export function RecycleBin({ info, onClose, onRestored }: { info: ObjectInfo; onClose: () => void; onRestored: () => void }) {
  const toast = useToast();
  const list = useAsync(() => deletedRecords(info), [info.apiName]);
  const [restored, setRestored] = useState<Set<string>>(new Set());
  const rows = (list.data ?? []).filter((r) => !restored.has(r.id));
  return (
    <Modal title={`Deleted ${info.labelPlural}`} onClose={onClose} footer={<Button onClick={onClose}>Close</Button>}>
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {!list.error && !list.data && <Spinner />}
      {list.data && rows.length === 0 && <EmptyState title={`No deleted ${info.labelPlural.toLowerCase()}`} />}
      {rows.length > 0 && (
        <>
          <p className="muted">The last {RECYCLE_BIN_SIZE} deleted that you can see, newest first.</p>
          <ul className="recycle-bin">
            {rows.map((r) => (
              <li key={r.id}>
                <span>
                  <strong>{r.name}</strong>{" "}
                  <span className="muted">{displayValue(DELETED_ON, r.deletedDate)}</span>
                </span>
                <Button
                  aria-label={`Restore ${r.name}`}
                  onClick={() =>
                    undeleteRecord(r.id).then(
                      () => {
                        setRestored((all) => new Set(all).add(r.id));
                        toast(`${info.label} "${r.name}" restored`);
                        onRestored();
                      },
                      (e) => toast(errorText(e), "error"),
                    )
                  }
                >
                  Restore
                </Button>
              </li>
            ))}
          </ul>
        </>
      )}
    </Modal>
  );
}
