// Users: the list, with create, access (permission sets, role), sessions, password reset and
// deactivate.
import { useState } from "react";
import { deactivateUser, resetPassword, users, type AdminUser } from "../../api/admin";
import { Button, ErrorState, Spinner, Table } from "../../ui/components";
import { errorText, useAsync } from "../../screens/useAsync";
import { useAction } from "../shared";
import { Access } from "./Access";
import { NewUser } from "./NewUser";
import { Sessions } from "./Sessions";
import { ShownOnce } from "./ShownOnce";

export function Users() {
  const list = useAsync(users, []);
  const run = useAction(list.reload);
  const [creating, setCreating] = useState(false);
  const [secret, setSecret] = useState<{ title: string; value: string }>();
  const [editing, setEditing] = useState<AdminUser>();
  const [viewing, setViewing] = useState<AdminUser>();
  const rows = (list.data ?? []).map((u) => ({ ...u, id: u.userId }));
  return (
    <section className="card admin-section" aria-labelledby="users-title">
      <div className="section-header">
        <h2 id="users-title">Users</h2>
        <Button variant="primary" onClick={() => setCreating(true)}>New user</Button>
      </div>
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && (
        <Table
          caption="Users"
          rows={rows}
          columns={[
            { key: "username", label: "Username", render: (u) => u.username },
            { key: "name", label: "Name", render: (u) => u.displayName ?? "—" },
            { key: "active", label: "Status", render: (u) => (u.isActive ? "Active" : "Inactive") + (u.isAdmin ? " · Admin" : "") },
            { key: "role", label: "Role", render: (u) => u.role ?? "—" },
            { key: "sets", label: "Permission sets", render: (u) => u.permissionSets.join(", ") || "—" },
          ]}
          actions={(u) => (
            <>
              <Button aria-label={`Access of ${u.username}`} onClick={() => setEditing(u)}>Access</Button>
              <Button aria-label={`Sessions of ${u.username}`} onClick={() => setViewing(u)}>Sessions</Button>
              <Button
                aria-label={`Reset password of ${u.username}`}
                onClick={() => void resetPassword(u.userId).then(
                  (r) => setSecret({ title: `New password for ${u.username}`, value: r.generatedPassword ?? "" }),
                  (e: unknown) => setSecret({ title: "Password not reset", value: errorText(e) }),
                )}
              >
                Reset password
              </Button>
              {u.isActive && (
                <Button variant="danger" aria-label={`Deactivate ${u.username}`} onClick={() => void run(() => deactivateUser(u.userId), `${u.username} deactivated`)}>
                  Deactivate
                </Button>
              )}
            </>
          )}
        />
      )}
      {creating && (
        <NewUser
          onClose={() => setCreating(false)}
          onCreated={(username, password) => {
            setCreating(false);
            list.reload();
            if (password) setSecret({ title: `Password for ${username}`, value: password });
          }}
        />
      )}
      {editing && <Access user={editing} onClose={() => { setEditing(undefined); list.reload(); }} />}
      {viewing && <Sessions user={viewing} onClose={() => setViewing(undefined)} />}
      {secret && <ShownOnce title={secret.title} value={secret.value} onClose={() => setSecret(undefined)} />}
    </section>
  );
}
