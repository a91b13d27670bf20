// A user's access: permission sets and role.
import { useState } from "react";
import { permissionSets, roles, setPermissionSets, setRole, type AdminUser } from "../../api/admin";
import { Button, Field, Modal, Spinner, useToast } from "../../ui/components";
import { errorText, useAsync } from "../../screens/useAsync";

export function Access({ user, onClose }: { user: AdminUser; onClose: () => void }) {
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
