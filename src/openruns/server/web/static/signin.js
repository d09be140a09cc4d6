// The sign-in page: the key goes once, in a POST body, to /api/v1/session, which answers with
// an HttpOnly session cookie. The key is never stored, put in a URL or kept in the page.

const API = "/api/v1";

// Where to go afterwards: a path on this server only (never another site).
function nextPath() {
  const next = new URLSearchParams(location.search).get("next") || "/";
  const local = next.startsWith("/") && !next.startsWith("//") && !next.startsWith("/\\");
  return local && !next.startsWith("/signin") ? next : "/";
}

function show(id, text) {
  const el = document.getElementById(id);
  if (text !== undefined) el.textContent = text;
  el.hidden = false;
}

function done(message) {
  document.getElementById("signin-form").hidden = true;
  document.getElementById("signin-note").hidden = true;
  document.getElementById("signin-next").href = nextPath();
  show("signin-done");
  document.getElementById("signin-status").textContent = message;
}

async function signIn(event) {
  event.preventDefault();
  const input = document.getElementById("signin-key");
  const key = input.value.trim();
  input.value = "";
  document.getElementById("signin-error").hidden = true;
  const response = await fetch(`${API}/session`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ key }),
  });
  if (response.ok) {
    location.replace(nextPath());
    return;
  }
  let message = `${response.status} ${response.statusText}`;
  try {
    message = (await response.json()).error?.message ?? message;
  } catch {
    // not JSON: keep the status line
  }
  show("signin-error", message);
  input.focus();
}

async function start() {
  document.getElementById("signin-form").addEventListener("submit", signIn);
  const session = await (await fetch(`${API}/session`)).json();
  if (!session.auth) done("This server does not require signing in.");
  else if (session.signed_in) done(`Signed in (team ${session.team_id}).`);
  else document.getElementById("signin-key").focus();
}

start().catch((error) => show("signin-error", String(error)));
