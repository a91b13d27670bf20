// Global search (Ctrl/Cmd-K): type, see records grouped by object, Enter opens one.
import { useEffect, useId, useRef, useState } from "react";
import { search } from "../api/crm";
import type { SearchGroup } from "../api/types";
import { navigate, paths } from "../router";
import { Modal } from "../ui/components";
import { errorText } from "./useAsync";

export function SearchPalette({ onClose }: { onClose: () => void }) {
  const [term, setTerm] = useState("");
  const [groups, setGroups] = useState<SearchGroup[]>([]);
  const [status, setStatus] = useState("Type at least 2 characters");
  const [active, setActive] = useState(0);
  const timer = useRef<ReturnType<typeof setTimeout>>();
  const id = useId();
  const flat = groups.flatMap((g) => g.records);

  useEffect(() => {
    clearTimeout(timer.current);
    if (term.trim().length < 2) {
      setGroups([]);
      setStatus("Type at least 2 characters");
      return;
    }
    setStatus("Searching…");
    timer.current = setTimeout(() => {
      search(term.trim()).then(
        (found) => {
          setGroups(found);
          setActive(0);
          const count = found.reduce((n, g) => n + g.records.length, 0);
          setStatus(count ? `${count} results` : `No results for “${term.trim()}”`);
        },
        (error) => setStatus(errorText(error)),
      );
    }, 250);
  }, [term]);

  const open = (index: number) => {
    const hit = flat[index];
    if (!hit) return;
    onClose();
    navigate(paths.record(hit.apiName, hit.id));
  };

  let index = -1;
  return (
    <Modal title="Search" onClose={onClose}>
      <label htmlFor={`${id}-q`} className="sr-only">Search records</label>
      <input
        id={`${id}-q`} className="search-input" type="search" role="combobox" autoComplete="off"
        aria-expanded={flat.length > 0} aria-controls={`${id}-results`}
        aria-activedescendant={flat[active] ? `${id}-hit-${active}` : undefined}
        placeholder="Search records…" value={term} onChange={(e) => setTerm(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "ArrowDown") { setActive((a) => Math.min(a + 1, flat.length - 1)); e.preventDefault(); }
          if (e.key === "ArrowUp") { setActive((a) => Math.max(a - 1, 0)); e.preventDefault(); }
          if (e.key === "Enter") { open(active); e.preventDefault(); }
        }}
      />
      <p className="muted search-status" aria-live="polite">{status}</p>
      <div id={`${id}-results`} role="listbox" aria-label="Search results" className="search-results">
        {groups.map((g) => (
          <div key={g.objectApiName} role="group" aria-label={g.label}>
            <p className="search-group" aria-hidden="true">{g.label}</p>
            {g.records.map((r) => {
              index += 1;
              const mine = index;
              return (
                <div key={r.id} id={`${id}-hit-${mine}`} role="option" aria-selected={mine === active}
                  className={`search-hit${mine === active ? " active" : ""}`}
                  onMouseDown={(e) => { e.preventDefault(); open(mine); }}>
                  {r.name}
                </div>
              );
            })}
          </div>
        ))}
      </div>
    </Modal>
  );
}
