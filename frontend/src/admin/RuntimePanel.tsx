// Runtime administration: users (create, deactivate, reset password, permission sets, role,
// sessions), Connected Apps (create showing the secret once, disable), inbox/outbox dead letters.
import { useState } from "react";
import {
  connectedApps, createConnectedApp, createUser, deactivateUser, disableConnectedApp, permissionSets, replayRuntime,
  resetPassword, revokeSession, roles, runtimeDeadLetters, sessions, setPermissionSets, setRole, users,
  type AdminUser, type ConnectedApp,
} from "../api/admin";
import { Button, EmptyState, ErrorState, Field, Modal, Spinner, Table, useToast } from "../ui/components";
import { errorText, useAsync } from "../screens/useAsync";
import { stamp } from "./AdminScreen";

export function RuntimePanel() {
  return (
    <>
      <Users />
      <ConnectedApps />
      <RuntimeDeadLetters />
    </>
  );
}

/** Run an action, toast its outcome, reload; errors are short messages. */
function useAction(reload: () => void) {
  const toast = useToast();
  return async (run: () => Promise<unknown>, success: string) => {
    try {
      await run();
      toast(success);
      reload();
    } catch (error) {
      toast(errorText(error), "error");
    }
  };
}

function Users() {
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

export function ShownOnce({ title, value, onClose }: { title: string; value: string; onClose: () => void }) {
  return (
    <Modal title={title} onClose={onClose} footer={<Button variant="primary" onClick={onClose}>Done</Button>}>
      <p>Copy it now: it is shown only once and cannot be read again.</p>
      <output className="secret" aria-label={title}>{value}</output>
    </Modal>
  );
}

function NewUser({ onClose, onCreated }: { onClose: () => void; onCreated: (username: string, password: string | null) => void }) {
  const [form, setForm] = useState({ username: "", displayName: "", email: "", role: "", permissionSet: "" });
  const [error, setError] = useState<string>();
  const sets = useAsync(permissionSets, []);
  const allRoles = useAsync(roles, []);
  const set = (key: keyof typeof form) => (e: { target: { value: string } }) => setForm({ ...form, [key]: e.target.value });
  const save = async () => {
    try {
      const made = await createUser({
        username: form.username, displayName: form.displayName || undefined, email: form.email || undefined,
        role: form.role || undefined, permissionSets: form.permissionSet ? [form.permissionSet] : [],
      });
      onCreated(made.username, made.generatedPassword);
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <Modal
      title="New user"
      onClose={onClose}
      footer={<><Button onClick={onClose}>Cancel</Button><Button variant="primary" onClick={() => void save()}>Create</Button></>}
    >
      {error && <p className="form-error" role="alert">{error}</p>}
      <Field id="nu-username" label="Username" required><input id="nu-username" value={form.username} onChange={set("username")} /></Field>
      <Field id="nu-name" label="Display name"><input id="nu-name" value={form.displayName} onChange={set("displayName")} /></Field>
      <Field id="nu-email" label="Email"><input id="nu-email" type="email" value={form.email} onChange={set("email")} /></Field>
      <Field id="nu-role" label="Role">
        <select id="nu-role" value={form.role} onChange={set("role")}>
          <option value="">None</option>
          {(allRoles.data ?? []).map((r) => <option key={r.name} value={r.name}>{r.name}</option>)}
        </select>
      </Field>
      <Field id="nu-set" label="Permission set">
        <select id="nu-set" value={form.permissionSet} onChange={set("permissionSet")}>
          <option value="">None</option>
          {(sets.data ?? []).map((s) => <option key={s.apiName} value={s.apiName}>{s.label}</option>)}
        </select>
      </Field>
      <p className="muted">A password is generated and shown once.</p>
    </Modal>
  );
}

function Access({ user, onClose }: { user: AdminUser; onClose: () => void }) {
  const sets = useAsync(permissionSets, []);
  const allRoles = useAsync(roles, []);
  const [chosen, setChosen] = useState(new Set(user.permissionSets.map((s) => s.toLowerCase())));
  const [role, setRoleName] = useState(user.role ?? "");
  const [error, setError] = useState<string>();
  const toast = useToast();
  const save = async () => {
    try {
      const names = (sets.data ?? []).filter((s) => chosen.has(s.apiName.toLowerCase())).map((s) => s.apiName);
      await setPermissionSets(user.userId, names);
      if ((user.role ?? "") !== role) await setRole(user.userId, role || null);
      toast(`Access of ${user.username} saved`);
      onClose();
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <Modal
      title={`Access of ${user.username}`}
      onClose={onClose}
      footer={<><Button onClick={onClose}>Cancel</Button><Button variant="primary" onClick={() => void save()}>Save</Button></>}
    >
      {error && <p className="form-error" role="alert">{error}</p>}
      <fieldset>
        <legend>Permission sets</legend>
        {sets.loading && <Spinner />}
        {(sets.data ?? []).map((s) => (
          <label key={s.apiName} className="field-checkbox">
            <input
              type="checkbox"
              checked={chosen.has(s.apiName.toLowerCase())}
              onChange={(e) => {
                const next = new Set(chosen);
                if (e.target.checked) next.add(s.apiName.toLowerCase()); else next.delete(s.apiName.toLowerCase());
                setChosen(next);
              }}
            />
            {s.label}
          </label>
        ))}
      </fieldset>
      <Field id="access-role" label="Role">
        <select id="access-role" value={role} onChange={(e) => setRoleName(e.target.value)}>
          <option value="">None</option>
          {(allRoles.data ?? []).map((r) => <option key={r.name} value={r.name}>{r.name}</option>)}
        </select>
      </Field>
    </Modal>
  );
}

function Sessions({ user, onClose }: { user: AdminUser; onClose: () => void }) {
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

function ConnectedApps() {
  const list = useAsync(connectedApps, []);
  const run = useAction(list.reload);
  const [name, setName] = useState("");
  const [redirect, setRedirect] = useState("");
  const [created, setCreated] = useState<ConnectedApp>();
  const [error, setError] = useState<string>();
  const create = async () => {
    setError(undefined);
    try {
      const app = await createConnectedApp(name.trim(), redirect.trim() ? [redirect.trim()] : []);
      setCreated(app);
      setName("");
      setRedirect("");
      list.reload();
    } catch (e) {
      setError(errorText(e));
    }
  };
  return (
    <section className="card admin-section" aria-labelledby="apps-title">
      <h2 id="apps-title">Connected Apps</h2>
      <form className="filters" aria-label="New Connected App" onSubmit={(e) => { e.preventDefault(); void create(); }}>
        <Field id="ca-name" label="App name" required><input id="ca-name" value={name} required onChange={(e) => setName(e.target.value)} /></Field>
        <Field id="ca-redirect" label="Redirect URI"><input id="ca-redirect" type="url" value={redirect} onChange={(e) => setRedirect(e.target.value)} /></Field>
        <Button type="submit" variant="primary">Create app</Button>
      </form>
      {error && <p className="form-error" role="alert">{error}</p>}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && (
        <Table
          caption="Connected Apps"
          rows={list.data.map((a) => ({ ...a, id: a.clientId }))}
          columns={[
            { key: "name", label: "Name", render: (a) => a.name },
            { key: "client", label: "Client id", render: (a) => <code>{a.clientId}</code> },
            { key: "kind", label: "Kind", render: (a) => (a.public ? "Public" : "Confidential") },
            { key: "state", label: "State", render: (a) => (a.enabled ? "Enabled" : "Disabled") },
          ]}
          actions={(a) => a.enabled && (
            <Button variant="danger" aria-label={`Disable ${a.name}`} onClick={() => void run(() => disableConnectedApp(a.clientId), `${a.name} disabled`)}>Disable</Button>
          )}
        />
      )}
      {created && (
        <ShownOnce title={`Client secret of ${created.name}`} value={created.clientSecret ?? "(a public client has no secret)"} onClose={() => setCreated(undefined)} />
      )}
    </section>
  );
}

function RuntimeDeadLetters() {
  const [queue, setQueue] = useState<"inbox" | "outbox">("inbox");
  const list = useAsync(() => runtimeDeadLetters(queue), [queue]);
  const toast = useToast();
  const replay = async (ids: string[]) => {
    try {
      const done = await replayRuntime(queue, ids);
      const refused = Object.entries(done.refused);
      toast(`Replayed ${done.replayed.length}` + (refused.length ? `, refused ${refused.map(([i, why]) => `${i}: ${why}`).join("; ")}` : ""), refused.length ? "error" : "success");
      list.reload();
    } catch (e) {
      toast(errorText(e), "error");
    }
  };
  return (
    <section className="card admin-section" aria-labelledby="rdl-title">
      <div className="section-header">
        <h2 id="rdl-title">Runtime dead letters</h2>
        <label htmlFor="rdl-queue" className="inline-label">Queue</label>
        <select id="rdl-queue" value={queue} onChange={(e) => setQueue(e.target.value as "inbox" | "outbox")}>
          <option value="inbox">Inbox (commands)</option>
          <option value="outbox">Outbox (after-save actions)</option>
        </select>
      </div>
      {list.loading && !list.data && <Spinner />}
      {list.error && <ErrorState message={list.error} onRetry={list.reload} />}
      {list.data && !list.data.length && <EmptyState title={`No dead letters in the ${queue}`} />}
      {!!list.data?.length && (
        <>
          <Table
            caption="Runtime dead letters"
            rows={list.data}
            columns={[
              { key: "class", label: "Queue class", render: (d) => d.queueClass },
              { key: "failure", label: "Failure", render: (d) => `${d.failureClass ?? d.state}: ${d.error ?? "—"}` },
              { key: "attempts", label: "Attempts", render: (d) => d.attempts },
              { key: "at", label: "Parked at", render: (d) => stamp(d.deadAtMs) },
            ]}
            actions={(d) => <Button aria-label={`Replay ${d.id}`} onClick={() => void replay([d.id])}>Replay</Button>}
          />
          <Button onClick={() => void replay(list.data!.map((d) => d.id))}>Replay all shown</Button>
        </>
      )}
    </section>
  );
}
