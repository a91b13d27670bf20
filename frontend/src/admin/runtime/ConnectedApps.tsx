// Connected Apps: create (the client secret shown once), disable.
import { useState } from "react";
import { connectedApps, createConnectedApp, disableConnectedApp, type ConnectedApp } from "../../api/admin";
import { Button, ErrorState, Field, Table } from "../../ui/components";
import { errorText, useAsync } from "../../screens/useAsync";
import { useAction } from "../shared";
import { ShownOnce } from "./ShownOnce";

export function ConnectedApps() {
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
