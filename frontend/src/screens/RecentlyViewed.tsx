import { paths } from "../router";
import { Link } from "../ui/components";
import { useRecentlyViewed } from "./recent";

/** The records opened in this session, newest first (nothing when there are none yet). */
export function RecentlyViewed({ current }: { current?: string }) {
  const list = useRecentlyViewed();
  if (!list.length) return null;
  return (
    <nav className="recent" aria-label="Recently viewed">
      <span className="recent-title">Recently viewed</span>
      <ul>
        {list.map((r) => (
          <li key={r.id}>
            <Link href={paths.record(r.object, r.id)} aria-current={r.id === current ? "page" : undefined}
              title={`${r.objectLabel}: ${r.name}`}>
              <span className="recent-kind">{r.objectLabel}</span> {r.name}
            </Link>
          </li>
        ))}
      </ul>
    </nav>
  );
}
