// Runtime administration: users (create, deactivate, reset password, permission sets, role,
// sessions), Connected Apps (create showing the secret once, disable), inbox/outbox dead letters.
import { ConnectedApps } from "./runtime/ConnectedApps";
import { RuntimeDeadLetters } from "./runtime/RuntimeDeadLetters";
import { Users } from "./runtime/Users";

export function RuntimePanel() {
  return (
    <>
      <Users />
      <ConnectedApps />
      <RuntimeDeadLetters />
    </>
  );
}
