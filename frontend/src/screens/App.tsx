import { useEffect, useState } from "react";
import { navItems } from "../api/crm";
import { api } from "../api/http";
import type { NavItem } from "../api/types";
import { completeSignIn, isSignedIn, onSessionChange, signOut, startSignIn } from "../auth/session";
import { currentPath, navigate, parseRoute, paths, usePath } from "../router";
import { Button, EmptyState, ErrorState, Link, Spinner, ToastProvider } from "../ui/components";
import { AdminScreen } from "../admin/AdminScreen";
import { ListScreen } from "./ListScreen";
import { forgetViewed } from "./recent";
import { RecentlyViewed } from "./RecentlyViewed";
import { RecordScreen } from "./RecordScreen";
import { SearchPalette } from "./SearchPalette";
import { errorText, useAsync } from "./useAsync";

export function App() {
  const path = usePath();
  const route = parseRoute(path);
  const [signedIn, setSignedIn] = useState(isSignedIn());
  const [signedOut, setSignedOut] = useState(false);
  const [callbackError, setCallbackError] = useState<string>();

  useEffect(
    () =>
      onSessionChange(() => {
        const now = isSignedIn();
        setSignedIn(now);
        // The session ended under us (expired, revoked): sign in and come back here.
        if (!now && !signingOut) void startSignIn(currentPath());
      }),
    [],
  );

  useEffect(() => {
    if (route.name === "callback") {
      if (callbackStarted) return;
      callbackStarted = true;
      completeSignIn(window.location.search).then(
        (back) => navigate(back, true),
        (error) => setCallbackError(errorText(error)),
      );
    } else if (!isSignedIn() && !signedOut) {
      void startSignIn(currentPath());
    }
    // eslint-disable-next-line react-hooks/exhaustive-deps -- once per page load: finish the OAuth callback or start sign-in; re-running on route/sign-out changes would redirect again
  }, []);

  if (route.name === "callback" && callbackError) {
    return (
      <main className="centered">
        <ErrorState message={callbackError} />
        <Button variant="primary" onClick={() => void startSignIn("/")}>Sign in</Button>
      </main>
    );
  }
  if (signedOut) {
    return (
      <main className="centered">
        <h1>You are signed out</h1>
        <p>Your session was ended on this device.</p>
        <Button variant="primary" onClick={() => void startSignIn("/")}>Sign in again</Button>
      </main>
    );
  }
  if (!signedIn || route.name === "callback") return <main className="centered"><Spinner label="Signing in…" /></main>;
  return (
    <ToastProvider>
      <Shell
        onSignOut={async () => {
          signingOut = true;
          await signOut();
          forgetViewed();
          setSignedOut(true);
          signingOut = false;
        }}
      />
    </ToastProvider>
  );
}

let signingOut = false;
let callbackStarted = false;

function Shell({ onSignOut }: { onSignOut: () => void }) {
  const path = usePath();
  const route = parseRoute(path);
  const nav = useAsync(navItems, []);
  const me = useAsync(() => api<Record<string, unknown>>("/services/oauth2/userinfo"), []);
  const [searching, setSearching] = useState(false);

  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      if ((event.ctrlKey || event.metaKey) && event.key.toLowerCase() === "k") {
        event.preventDefault();
        setSearching(true);
      }
    };
    document.addEventListener("keydown", onKey);
    return () => document.removeEventListener("keydown", onKey);
  }, []);

  useEffect(() => {
    if (route.name === "home" && nav.data?.length) navigate(paths.list(nav.data[0].objectApiName), true);
  }, [route.name, nav.data]);

  const activeObject = route.name === "list" || route.name === "record" ? route.object : null;
  const userName = String(me.data?.name ?? me.data?.preferred_username ?? "");
  // a hint for the menu only: the servers decide every admin request
  const isAdmin = me.data?.is_admin === true;

  return (
    <div className="shell">
      <a className="skip-link" href="#main">Skip to content</a>
      <header className="topbar">
        <Link href="/" className="brand">Nexus CRM</Link>
        <Button className="search-trigger" onClick={() => setSearching(true)} aria-keyshortcuts="Control+K Meta+K">
          <span>Search…</span> <kbd>Ctrl K</kbd>
        </Button>
        <div className="user">
          {isAdmin && <Link href="/admin" className="admin-link" aria-current={route.name === "admin" ? "page" : undefined}>Admin</Link>}
          {userName && <span className="user-name">{userName}</span>}
          <Button variant="ghost" onClick={onSignOut}>Sign out</Button>
        </div>
      </header>
      <nav className="appnav" aria-label="Objects">
        {nav.loading && !nav.data && <span className="muted">Loading…</span>}
        {nav.error && <span className="muted">Navigation unavailable</span>}
        <ul>
          {(nav.data ?? []).map((item: NavItem) => (
            <li key={item.objectApiName}>
              <Link
                href={paths.list(item.objectApiName)}
                aria-current={activeObject === item.objectApiName ? "page" : undefined}
              >
                {item.labelPlural}
              </Link>
            </li>
          ))}
        </ul>
      </nav>
      <RecentlyViewed current={route.name === "record" ? route.id : undefined} />
      <main id="main" className="content" tabIndex={-1}>
        {route.name === "list" && <ListScreen key={route.object + route.view} object={route.object} view={route.view} />}
        {route.name === "record" && (
          <RecordScreen key={route.object + route.id} object={route.object} id={route.id} nav={nav.data ?? []} />
        )}
        {route.name === "admin" && <AdminScreen key={route.section} section={route.section} />}
        {route.name === "home" && (nav.loading ? <Spinner /> : nav.error ? <ErrorState message={nav.error} onRetry={nav.reload} /> : !nav.data?.length && (
          <EmptyState title="No objects yet">Install an App to see its objects here.</EmptyState>
        ))}
        {route.name === "notFound" && (
          <EmptyState title="Page not found">
            <Link href="/">Go to the start page</Link>
          </EmptyState>
        )}
      </main>
      {searching && <SearchPalette onClose={() => setSearching(false)} />}
    </div>
  );
}
