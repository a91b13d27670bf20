// A secret (generated password, client secret) shown once in a modal.
import { Button, Modal } from "../../ui/components";

export function ShownOnce({ title, value, onClose }: { title: string; value: string; onClose: () => void }) {
  return (
    <Modal title={title} onClose={onClose} footer={<Button variant="primary" onClick={onClose}>Done</Button>}>
      <p>Copy it now: it is shown only once and cannot be read again.</p>
      <output className="secret" aria-label={title}>{value}</output>
    </Modal>
  );
}
