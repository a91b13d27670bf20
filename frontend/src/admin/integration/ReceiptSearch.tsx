// The receipt audit of a delivery id.
import { useRef, useState } from "react";
import { receipts } from "../../api/admin";
import { Button, EmptyState, ErrorState, Field } from "../../ui/components";
import { errorText } from "../../screens/useAsync";

export function ReceiptSearch() {
  const [delivery, setDelivery] = useState("");
  const [found, setFound] = useState<Array<Record<string, unknown>>>();
  const [error, setError] = useState<string>();
  const input = useRef<HTMLInputElement>(null);
  return (
    <section className="card admin-section" aria-labelledby="receipts-title">
      <h2 id="receipts-title">Receipts</h2>
      <form
        className="filters"
        role="search"
        aria-label="Receipts"
        onSubmit={(e) => {
          e.preventDefault();
          setError(undefined);
          receipts(delivery.trim()).then((r) => setFound(r.receipts), (err: unknown) => setError(errorText(err)));
        }}
      >
        <Field id="receipt-delivery" label="Delivery id">
          <input id="receipt-delivery" ref={input} value={delivery} required onChange={(e) => setDelivery(e.target.value)} />
        </Field>
        <Button type="submit">Find</Button>
      </form>
      {error && <ErrorState message={error} />}
      {found && !found.length && <EmptyState title="No receipt with this delivery id" />}
      {found?.map((r) => (
        <dl key={String(r.receipt_id)} className="receipt">
          {Object.entries(r).map(([k, v]) => (
            <div key={k}><dt>{k}</dt><dd>{typeof v === "object" ? JSON.stringify(v) : String(v)}</dd></div>
          ))}
        </dl>
      ))}
    </section>
  );
}
