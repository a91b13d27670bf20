// A hand-rolled SVG sparkline (no chart library): the last N values, the latest as text.
import { sparkline } from "../api/admin";

const WIDTH = 120;
const HEIGHT = 28;

export function Sparkline({ label, values, unit = "" }: { label: string; values: number[]; unit?: string }) {
  const latest = values.length ? values[values.length - 1] : 0;
  const shown = Number.isInteger(latest) ? String(latest) : latest.toFixed(1);
  return (
    <figure className="spark">
      <figcaption>
        <span className="spark-label">{label}</span> <strong>{shown}{unit}</strong>
      </figcaption>
      <svg width={WIDTH} height={HEIGHT} viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label={`${label}: ${shown}${unit}`}>
        <polyline points={sparkline(values, WIDTH, HEIGHT - 2)} fill="none" stroke="currentColor" strokeWidth="1.5" />
      </svg>
    </figure>
  );
}
