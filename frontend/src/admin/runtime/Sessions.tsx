// A user's live sessions, each revocable.
import { revokeSession, sessions, type AdminUser } from "../../api/admin";
import { Button, EmptyState, ErrorState, Modal, Spinner, Table } from "../../ui/components";
import { useAsync } from "../../screens/useAsync";
import { stamp, useAction } from "../shared";

export function Sessions({ user, onClose }: { user: AdminUser; onClose: () => void }) {
  const list = useAsync(() => sessions(user.userId), [user.userId]);
  const run = useAction(list.reload);
  return (
    <Modal title={`Sessions of ${user.username}`} onClose={onClose}>
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} />}
      {list.data && !list.data.length && <EmptyState title="No live sessions" />}
      {!!list.data?.length && (
        <Table
          caption="Sessions"
          rows={list.data.map((s) => ({ ...s, id: s.sessionId }))}
          columns={[
            { key: "client", label: "App", render: (s) => s.clientId },
            { key: "how", label: "Signed in by", render: (s) => s.authMethod },
            { key: "created", label: "Started", render: (s) => stamp(s.createdAtMs) },
            { key: "expires", label: "Expires", render: (s) => stamp(s.expiresAtMs) },
          ]}
          actions={(s) => <Button variant="danger" onClick={() => void run(() => revokeSession(s.sessionId), "Session revoked")}>Revoke</Button>}
        />
      )}
    </Modal>
  );
}
