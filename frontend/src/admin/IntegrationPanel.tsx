// Integration operations: live queue charts, the dead-letter list with filters and replay
// (one, selected, all since T; refusals show their fail-closed reason), failed deliveries
// (receipts whose mapping failed: fix the route, replay them through it), halted lanes with
// skip/replay, and the receipt audit of a delivery id.
import { useState } from "react";
import { DeadLetters } from "./integration/DeadLetters";
import { FailedDeliveries } from "./integration/FailedDeliveries";
import { QueueCharts } from "./integration/QueueCharts";
import { ReceiptSearch } from "./integration/ReceiptSearch";

export function IntegrationPanel() {
  const [changed, setChanged] = useState(0);
  return (
    <>
      <QueueCharts />
      <DeadLetters halted={false} changed={changed} onChange={() => setChanged((n) => n + 1)} />
      <FailedDeliveries changed={changed} onChange={() => setChanged((n) => n + 1)} />
      <DeadLetters halted changed={changed} onChange={() => setChanged((n) => n + 1)} />
      <ReceiptSearch />
    </>
  );
}
