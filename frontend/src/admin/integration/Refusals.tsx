// The refusal lines of the last replay (their fail-closed reasons).
export function Refusals({ lines }: { lines: string[] }) {
  if (!lines.length) return null;
  return (
    <div className="refusals" role="alert">
      <p className="state-title">Refused (nothing was replayed for these)</p>
      <ul>{lines.map((line) => <li key={line}>{line}</li>)}</ul>
    </div>
  );
}
