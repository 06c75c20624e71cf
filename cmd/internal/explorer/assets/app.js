// Quorumbus Explorer: a single page over the admin API (ATOM management API, JSON
// cluster API under /$cluster/) and the explorer's JSON API under /$ui/api/. Every
// request carries a SAS token signed here from the key the operator logged in with.
// Values from the broker are written with textContent only, never as HTML.
'use strict';

const API_VERSION = '2021-05';
const NS_ATOM = 'http://www.w3.org/2005/Atom';
const NS_SB = 'http://schemas.microsoft.com/netservices/2010/10/servicebus/connect';
const NS_XSI = 'http://www.w3.org/2001/XMLSchema-instance';
const POLL_MS = 4000;

const state = {
  cred: null, // {keyName, key}
  token: null, tokenUntil: 0,
  timer: null, // the current view's poll timer
  view: 0, // bumped on every navigation, so a late answer does not draw over a new view
};

// ---- DOM helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const $ = (sel, root = document) => root.querySelector(sel);

function field(label, input, cls) {
  const id = input.id || ('f-' + Math.random().toString(36).slice(2));
  input.id = id;
  if (input.type === 'checkbox') return h('div', { class: cls }, h('label', { class: 'check', for: id }, input, label));
  return h('div', { class: cls }, h('label', { for: id }, label, input));
}

function status(msg) {
  const s = $('#status');
  s.textContent = msg;
  clearTimeout(status.t);
  status.t = setTimeout(() => { s.textContent = ''; }, 4000);
}

function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, String(err && err.message ? err.message : err));
}

function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  if (isNaN(d) || d.getUTCFullYear() < 1971 || d.getUTCFullYear() > 9000) return '';
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function fmtBytes(n) {
  n = Number(n) || 0;
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

// ---- requests

function authHeader() {
  const now = Date.now() / 1000;
  if (!state.token || now > state.tokenUntil) {
    const uri = location.protocol + '//' + location.host + '/';
    state.token = SAS.token(uri, state.cred.keyName, state.cred.key, 3600);
    state.tokenUntil = now + 600;
  }
  return state.token;
}

class APIError extends Error {
  constructor(code, message) { super(message); this.code = code; }
}

// request sends a request with the token and returns the response, or throws an
// APIError with the server's own words (ATOM <Detail>, or a JSON message).
async function request(method, path, { body, headers, query } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query || {})) url.searchParams.set(k, v);
  const resp = await fetch(url, { method, body, headers: { Authorization: authHeader(), ...(headers || {}) } });
  if (!resp.ok) {
    const text = await resp.text();
    let msg = text;
    try { msg = JSON.parse(text).message || text; } catch (_) {
      const d = new DOMParser().parseFromString(text, 'application/xml').getElementsByTagName('Detail')[0];
      if (d) msg = d.textContent;
    }
    if (resp.status === 401 && !path.startsWith('/$namespaceinfo')) {
      logout('Your key was refused: ' + msg);
    }
    throw new APIError(resp.status, `${resp.status}: ${msg}`);
  }
  return resp;
}

async function atom(path, query) {
  const resp = await request('GET', path, { query: { 'api-version': API_VERSION, ...(query || {}) } });
  return new DOMParser().parseFromString(await resp.text(), 'application/xml');
}

async function json(method, path, body) {
  const resp = await request(method, path, body === undefined ? {} :
    { body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
  const t = await resp.text();
  return t ? JSON.parse(t) : null;
}

// progressStream posts body to an explorer API path that answers with NDJSON progress
// lines (a redrive or a purge), calls onLine with each, and returns the last.
async function progressStream(path, body, onLine) {
  const resp = await request('POST', path, { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let last = { done: 0 };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line) continue;
      last = JSON.parse(line);
      onLine(last);
    }
  }
  return last;
}

function val(el, name) {
  const n = el.getElementsByTagNameNS('*', name)[0];
  return n ? n.textContent : '';
}

function entriesOf(doc, descName) {
  return [...doc.getElementsByTagNameNS(NS_ATOM, 'entry')].map((e) => {
    const d = e.getElementsByTagNameNS('*', descName)[0];
    return { name: val(e, 'title'), d };
  }).filter((x) => x.d);
}

function counts(d) {
  return {
    active: Number(val(d, 'ActiveMessageCount')) || 0,
    dead: Number(val(d, 'DeadLetterMessageCount')) || 0,
    scheduled: Number(val(d, 'ScheduledMessageCount')) || 0,
    transfer: Number(val(d, 'TransferMessageCount')) || 0,
    total: Number(val(d, 'MessageCount')) || 0,
    size: Number(val(d, 'SizeInBytes')) || 0,
  };
}

function esc(s) {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

// descXML wraps elements ([[name, value]...]) in an ATOM entry. An empty value is
// sent as an empty element, which clears a property such as ForwardTo.
function descXML(kind, els, inner) {
  const body = els.filter(([, v]) => v !== undefined && v !== null)
    .map(([k, v]) => `<${k}>${esc(v)}</${k}>`).join('') + (inner || '');
  return `<entry xmlns="${NS_ATOM}"><content type="application/xml"><${kind} xmlns="${NS_SB}" xmlns:i="${NS_XSI}">${body}</${kind}></content></entry>`;
}

function putDesc(path, xml, update) {
  const headers = { 'Content-Type': 'application/atom+xml;type=entry;charset=utf-8' };
  if (update) headers['If-Match'] = '*';
  return request('PUT', path, { body: xml, headers, query: { 'api-version': API_VERSION } });
}

const enc = (s) => encodeURIComponent(s);
const entityPath = (t) => t.sub ? `/${enc(t.entity)}/Subscriptions/${enc(t.sub)}` : `/${enc(t.entity)}`;

// ---- login

function logout(reason) {
  state.cred = null;
  state.token = null;
  sessionStorage.removeItem('qb.cred');
  renderLogin(reason);
}

function renderLogin(reason) {
  stopPoll();
  $('#nav').hidden = true;
  $('#who').hidden = true;
  $('#logout').hidden = true;
  const cs = h('textarea', { name: 'cs', rows: 3, autocomplete: 'off', spellcheck: 'false',
    placeholder: 'Endpoint=sb://…;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=…' });
  const kn = h('input', { name: 'keyName', autocomplete: 'username', placeholder: 'RootManageSharedAccessKey' });
  const key = h('input', { name: 'key', type: 'password', autocomplete: 'current-password' });
  const err = h('div');
  const form = h('form', { class: 'login', 'aria-labelledby': 'login-title' },
    h('h2', { id: 'login-title' }, 'Log in'),
    h('p', { class: 'note' }, 'Use the namespace\'s connection string, or a key with the Manage right. ',
      'The key stays in this browser tab; requests carry a signed token.'),
    h('fieldset', {}, h('legend', {}, 'Connection string'), field('Connection string', cs)),
    h('p', { class: 'or' }, 'or'),
    h('fieldset', {}, h('legend', {}, 'Shared access key'), field('Key name', kn), field('Key', key)),
    err,
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'login-submit' }, 'Log in')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.replaceChildren();
    try {
      const cred = cs.value.trim() ? SAS.parseConnectionString(cs.value.trim())
        : { keyName: kn.value.trim(), key: key.value };
      if (!cred.keyName || !cred.key) throw new Error('Enter a connection string, or a key name and key.');
      state.cred = cred;
      state.token = null;
      await atom('/$namespaceinfo');
      sessionStorage.setItem('qb.cred', JSON.stringify(cred));
      if (!location.hash || location.hash === '#/login') location.hash = '#/overview';
      else route();
    } catch (e) {
      state.cred = null;
      err.replaceChildren(errorBox(e.code === 401 ? 'The key was refused: ' + e.message : e));
    }
  });
  const view = $('#view');
  view.replaceChildren(...(reason ? [errorBox(reason)] : []), form);
  (cs.value ? cs : cs).focus();
}

// ---- routing

function stopPoll() {
  clearInterval(state.timer);
  state.timer = null;
}

function poll(fn) {
  stopPoll();
  state.timer = setInterval(() => { if (!document.hidden) fn(); }, POLL_MS);
}

async function route() {
  if (!state.cred) {
    renderLogin();
    return;
  }
  stopPoll();
  const view = ++state.view;
  $('#nav').hidden = false;
  $('#logout').hidden = false;
  const who = $('#who');
  who.hidden = false;
  who.textContent = 'Key: ' + state.cred.keyName;
  const parts = (location.hash.replace(/^#\/?/, '') || 'overview').split('/').map(decodeURIComponent);
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === '#/' + (parts[0] === 'q' || parts[0] === 't' ? 'entities' : parts[0])) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = $('#view');
  let first = true;
  const draw = (...nodes) => {
    if (view !== state.view) return;
    main.replaceChildren(...nodes);
    // After a navigation, keyboard and screen-reader users start at the new page's
    // content; a refresh of the same page leaves the focus where it is.
    if (first && state.navigated) main.focus({ preventScroll: true });
    first = false;
  };
  try {
    switch (parts[0]) {
      case 'login': location.hash = '#/overview'; break;
      case 'overview': await renderOverview(draw, view); break;
      case 'cluster': await renderCluster(draw, view); break;
      case 'entities': await renderEntities(draw, view); break;
      case 'q': await renderEntity(draw, view, { entity: parts[1], kind: 'queue' }, parts[2] || 'messages'); break;
      case 't':
        if (parts[2] === 's') await renderEntity(draw, view, { entity: parts[1], sub: parts[3], kind: 'subscription' }, parts[4] || 'messages');
        else await renderEntity(draw, view, { entity: parts[1], kind: 'topic' }, parts[2] || 'subscriptions');
        break;
      default: draw(h('h2', {}, 'Not found'), h('p', {}, 'No page here. '), h('a', { href: '#/overview' }, 'Overview'));
    }
  } catch (e) {
    if (e.code !== 401) draw(h('h2', {}, 'Something went wrong'), errorBox(e));
  }
}


// ---- rates and health

// The node's counters, sampled on every refresh: a rate is the difference between this
// sample and the oldest of the last RATE_WINDOW_MS, over the time between them as the
// node stamped them (so two refreshes close together do not make a noisy rate). dlq
// keeps each entity's dead-letter count over the last minute, so "growing" does not
// flicker between polls.
const samples = { hist: [], dlq: new Map() };
const LAG_ENTRIES = Problems.LAG_ENTRIES; // a replica this far behind is lagging (problems.js)
const RATE_WINDOW_MS = 15000;
const DLQ_WINDOW_MS = 60000;

function entKey(entity, sub) { return (entity + '\u0000' + (sub || '')).toLowerCase(); }

// loadStats returns the cluster's counters with rates per second over the last few
// samples (null rates until there is an earlier one), per node and per entity.
async function loadStats() {
  const st = await json('POST', '/$ui/api/stats', {});
  const t = Date.parse(st.time);
  samples.hist = samples.hist.filter((x) => t - x.t <= RATE_WINDOW_MS && x.t < t);
  const prev = samples.hist[0];
  const dt = prev ? (t - prev.t) / 1000 : 0;
  const rate = (cur, old) => (dt > 0 && old !== undefined ? Math.max(0, cur - old) / dt : null);
  const nodes = new Map(), ents = new Map();
  for (const n of st.nodes) {
    const o = prev && prev.nodes.get(n.node);
    nodes.set(n.node, { ...n, inRate: rate(n.incoming, o && o.incoming), outRate: rate(n.outgoing, o && o.outgoing) });
  }
  for (const e of st.entities) {
    const k = entKey(e.entity, e.subscription);
    const o = prev && prev.ents.get(k);
    const hist = (samples.dlq.get(k) || []).filter((x) => t - x.t <= DLQ_WINDOW_MS);
    hist.push({ t, v: e.deadLetter });
    samples.dlq.set(k, hist);
    const growing = hist.length > 1 && e.deadLetter > Math.min(...hist.map((x) => x.v));
    ents.set(k, { ...e, inRate: rate(e.incoming, o && o.incoming), outRate: rate(e.outgoing, o && o.outgoing), dlqGrowing: growing });
  }
  samples.hist.push({ t, nodes: new Map(st.nodes.map((n) => [n.node, n])), ents: new Map(st.entities.map((e) => [entKey(e.entity, e.subscription), e])) });
  return { nodes, ents };
}

function fmtRate(r) {
  if (r === null || r === undefined) return '–';
  return r >= 100 ? r.toFixed(0) + '/s' : r.toFixed(1) + '/s';
}

function entStats(stats, entity, sub) {
  return (stats && stats.ents.get(entKey(entity, sub))) || { inRate: null, outRate: null, connections: 0, senderLinks: 0, receiverLinks: 0 };
}

function rateCells(e) {
  return [h('td', { class: 'num' }, fmtRate(e.inRate)), h('td', { class: 'num' }, fmtRate(e.outRate)),
    h('td', { class: 'num' }, String(e.connections || 0)), h('td', { class: 'num' }, String((e.senderLinks || 0) + (e.receiverLinks || 0)))];
}

// problems is the overview's Problems list (problems.js).
function problems(st, parts, stats) { return Problems.problems(st, parts, stats); }

function problemsPanel(list) {
  return h('section', { class: 'panel', 'aria-labelledby': 'problems-h', id: 'problems' },
    h('h3', { id: 'problems-h' }, list.length ? `Problems (${list.length})` : 'Problems'),
    list.length === 0 ? h('p', { class: 'note ok-note' }, 'None: every node answers, every replica is reachable and caught up, leadership is spread evenly, no dead-letter queue grows.') :
      h('ul', { class: 'problems' }, list.map((p) => h('li', { class: 'problem', 'data-kind': p.kind }, p.text))));
}

function nodeRatesTable(st, stats) {
  const ids = new Set([...((st && st.members) || []).map((m) => m.id), ...(stats ? stats.nodes.keys() : [])]);
  const state = new Map(((st && st.members) || []).map((m) => [m.id, m.state]));
  return h('div', { class: 'scroll' }, h('table', { id: 'node-rates' },
    h('thead', {}, h('tr', {}, ['Node', 'State', 'In', 'Out', 'Connections', 'Links']
      .map((c, i) => h('th', { scope: 'col', class: i >= 2 ? 'num' : null }, c)))),
    h('tbody', {}, [...ids].sort().map((id) => {
      const n = (stats && stats.nodes.get(id)) || {};
      const s = n.error ? 'unreachable' : (state.get(id) || '');
      return h('tr', { class: n.error || s === 'dead' || s === 'suspect' || s === 'removed' ? 'problem' : null },
        h('th', { scope: 'row', class: 'mono' }, id), h('td', {}, stateBadge(s)),
        h('td', { class: 'num' }, fmtRate(n.inRate)), h('td', { class: 'num' }, fmtRate(n.outRate)),
        h('td', { class: 'num' }, n.error ? '–' : String(n.connections || 0)), h('td', { class: 'num' }, n.error ? '–' : String(n.links || 0)));
    }))));
}

function stateBadge(s) {
  return h('span', { class: 'badge ' + ({ alive: 'ok', draining: 'warn', suspect: 'bad', dead: 'bad', left: 'bad', unreachable: 'bad' }[s] || '') }, s);
}

// ---- overview

async function loadEntities() {
  const [qd, td] = await Promise.all([atom('/$Resources/Queues', { '$top': 1000 }), atom('/$Resources/Topics', { '$top': 1000 })]);
  const queues = entriesOf(qd, 'QueueDescription').map((e) => ({ name: e.name, d: e.d, c: counts(e.d) }));
  const topics = entriesOf(td, 'TopicDescription').map((e) => ({ name: e.name, d: e.d, c: counts(e.d), subs: [] }));
  await Promise.all(topics.map(async (t) => {
    const sd = await atom(`/${enc(t.name)}/Subscriptions`, { '$top': 1000 });
    t.subs = entriesOf(sd, 'SubscriptionDescription').map((e) => ({ name: e.name, d: e.d, c: counts(e.d) }));
  }));
  return { queues, topics };
}

async function renderOverview(draw, view) {
  const box = h('div');
  await paintOverview(box);
  draw(box, h('p', {}, h('a', { href: '#/entities' }, 'Browse entities'), ' · ', h('a', { href: '#/cluster' }, 'Cluster view')));
  if (view === state.view) poll(() => paintOverview(box).catch(() => {}));
}

// paintOverview fills box with the namespace's totals (nothing in it takes focus, so a
// refresh moves no one's focus).
async function paintOverview(box) {
  const [nsDoc, ents, cl, parts, stats] = await Promise.all([atom('/$namespaceinfo'), loadEntities(),
    json('GET', '/$cluster/status').catch((e) => ({ error: e })), json('GET', '/$cluster/partitions').catch(() => []),
    loadStats().catch(() => null)]);
  const ns = nsDoc.getElementsByTagNameNS('*', 'NamespaceInfo')[0];
  let active = 0, dead = 0, scheduled = 0, subs = 0;
  for (const e of [...ents.queues, ...ents.topics.flatMap((t) => t.subs)]) {
    active += e.c.active; dead += e.c.dead; scheduled += e.c.scheduled;
  }
  for (const t of ents.topics) subs += t.subs.length;
  const card = (label, value) => h('div', { class: 'card' }, h('dt', {}, label), h('dd', {}, String(value)));
  const alive = cl.members ? cl.members.filter((m) => m.state === 'alive').length : 0;
  box.replaceChildren(
    h('h2', {}, 'Namespace ', h('span', { class: 'mono' }, val(ns, 'Name'))),
    h('dl', { class: 'cards', 'aria-label': 'Namespace totals' },
      card('Queues', ents.queues.length), card('Topics', ents.topics.length), card('Subscriptions', subs),
      card('Active messages', active), card('Scheduled', scheduled), card('Dead-lettered', dead),
      card('Nodes alive', cl.members ? `${alive} / ${cl.members.length}` : 'n/a')),
    problemsPanel(problems(cl.members ? cl : null, parts, stats)),
    h('section', { class: 'panel', 'aria-labelledby': 'rates-h' },
      h('h3', { id: 'rates-h' }, 'Nodes: messages per second, clients'),
      stats ? nodeRatesTable(cl.members ? cl : null, stats) : h('p', { class: 'note' }, 'No metrics from this node.')),
    h('section', { class: 'panel', 'aria-labelledby': 'ns-h' },
      h('h3', { id: 'ns-h' }, 'Namespace'),
      h('dl', { class: 'props' },
        h('dt', {}, 'Name'), h('dd', {}, val(ns, 'Name')),
        h('dt', {}, 'SKU'), h('dd', {}, val(ns, 'MessagingSKU')),
        h('dt', {}, 'Created'), h('dd', {}, fmtTime(val(ns, 'CreatedTime'))),
        h('dt', {}, 'Answered by node'), h('dd', {}, cl.nodeId || ''),
        h('dt', {}, 'Metadata leader'), h('dd', {}, cl.metadataLeader || (cl.error ? String(cl.error.message) : 'none')))));
}

// ---- cluster

async function renderCluster(draw, view) {
  const paint = async () => {
    const [st, parts, stats, rb] = await Promise.all([json('GET', '/$cluster/status'), json('GET', '/$cluster/partitions'),
      loadStats().catch(() => null), json('GET', '/$cluster/rebalance').catch(() => null)]);
    const badge = stateBadge;
    const replica = (p, r) => {
      if (r.unreachable) return h('span', { class: 'badge bad replica' }, `${r.node}${r.voter ? '' : ' (nonvoter)'}: unreachable`);
      const text = `${r.node}${r.voter ? '' : ' (nonvoter)'}: ${r.lastIndex}, lag ${r.lag}`;
      return p.leader && r.node !== p.leader && r.lag >= LAG_ENTRIES ? h('span', { class: 'badge warn replica' }, text) : h('span', { class: 'replica' }, text);
    };
    draw(
      h('h2', {}, 'Cluster'),
      h('p', { class: 'note' }, `Answered by node ${st.nodeId}; metadata leader: ${st.metadataLeader || 'none'}. Refreshes every ${POLL_MS / 1000} s.`),
      problemsPanel(problems(st, parts, stats)),
      h('section', { class: 'panel', 'aria-labelledby': 'nodes-h' },
        h('h3', { id: 'nodes-h' }, `Nodes (${st.members.length})`),
        h('div', { class: 'scroll' }, h('table', { id: 'nodes' },
          h('thead', {}, h('tr', {}, ['Node', 'State', 'Zone', 'Metadata role', 'AMQP', 'Admin', 'Replicas', 'Leading', 'In', 'Out', 'Connections', 'Links']
            .map((c, i) => h('th', { scope: 'col', class: i >= 6 ? 'num' : null }, c)))),
          h('tbody', {}, st.members.map((m) => {
            const n = (stats && stats.nodes.get(m.id)) || {};
            return h('tr', { class: m.state === 'dead' || m.state === 'suspect' || m.state === 'removed' || n.error ? 'problem' : null },
              h('th', { scope: 'row', class: 'mono' }, m.id), h('td', {}, badge(m.state)), h('td', {}, m.zone || ''),
              h('td', {}, m.metadataRole || ''), h('td', { class: 'mono' }, m.amqpAddr || ''), h('td', { class: 'mono' }, m.adminAddr || ''),
              h('td', { class: 'num' }, m.replicas), h('td', { class: 'num' }, m.leading),
              h('td', { class: 'num' }, fmtRate(n.inRate)), h('td', { class: 'num' }, fmtRate(n.outRate)),
              h('td', { class: 'num' }, n.error ? '–' : String(n.connections || 0)), h('td', { class: 'num' }, n.error ? '–' : String(n.links || 0)));
          }))))),
      rebalancePanel(Problems.rebalance(rb)),
      h('section', { class: 'panel', 'aria-labelledby': 'parts-h' },
        h('h3', { id: 'parts-h' }, `Partitions (${parts.length})`),
        h('div', { class: 'scroll' }, h('table', { id: 'partitions' },
          h('thead', {}, h('tr', {}, ['Entity', 'Partition', 'Group', 'Leader', 'Replicas (last index, lag)']
            .map((c, i) => h('th', { scope: 'col', class: i === 1 || i === 2 ? 'num' : null }, c)))),
          h('tbody', {}, parts.map((p) => h('tr', {},
            h('th', { scope: 'row' }, p.entity), h('td', { class: 'num' }, p.index), h('td', { class: 'num' }, p.groupId),
            h('td', {}, p.leader ? p.leader : h('span', { class: 'badge bad' }, 'none')),
            h('td', { class: 'mono' }, p.replicas.flatMap((r, i) => (i ? [' · ', replica(p, r)] : [replica(p, r)])),
              // Fewer live voters than --replicas (capped by the registered nodes).
              p.underReplicated ? [' ', h('span', { class: 'badge warn' }, `under-replicated (wants ${p.wantReplicas})`)] : []))))))));
  };
  await paint();
  if (view === state.view) poll(() => paint().catch(() => {}));
}

// rebalancePanel shows replica rebalancing (GET /$cluster/rebalance, summarized by
// problems.js): balanced or not, the nodes away from an even share, and each group
// whose replicas are moving. Nothing for a node that does not report it.
function rebalancePanel(r) {
  if (!r) return null;
  const cls = { balanced: 'ok', moving: 'warn', uneven: 'warn', off: 'bad' }[r.state];
  return h('section', { class: 'panel', 'aria-labelledby': 'rebalance-h' },
    h('h3', { id: 'rebalance-h' }, `Rebalancing (${r.moves.length} ${r.moves.length === 1 ? 'move' : 'moves'})`),
    h('p', { id: 'rebalance-state' }, h('span', { class: 'badge ' + cls }, r.state), ' ', r.text),
    r.uneven.length ? h('p', { class: 'note' }, 'Away from an even share: ' + r.uneven.join('; ') + '.') : null,
    r.moves.length ? h('div', { class: 'scroll' }, h('table', { id: 'rebalance-moves' },
      h('thead', {}, h('tr', {}, ['Entity', 'Partition', 'Group', 'Replicas moving']
        .map((c, i) => h('th', { scope: 'col', class: i === 1 || i === 2 ? 'num' : null }, c)))),
      h('tbody', {}, r.moves.map((m) => h('tr', {},
        h('th', { scope: 'row' }, m.entity), h('td', { class: 'num' }, m.index), h('td', { class: 'num' }, m.groupId),
        h('td', { class: 'mono' }, m.text.slice(m.text.indexOf(': ') + 2))))))) : null);
}

// ---- entities

function countCells(c) {
  return [h('td', { class: 'num' }, c.active), h('td', { class: 'num' }, c.scheduled),
    h('td', { class: 'num' }, c.dead), h('td', { class: 'num' }, fmtBytes(c.size))];
}

async function renderEntities(draw, view) {
  const qForm = entityForm('queue', null, async (xml, name) => {
    await putDesc('/' + enc(name), xml, false);
    status(`Queue ${name} created`);
    location.hash = '#/q/' + enc(name);
  });
  const tForm = entityForm('topic', null, async (xml, name) => {
    await putDesc('/' + enc(name), xml, false);
    status(`Topic ${name} created`);
    location.hash = '#/t/' + enc(name);
  });
  const tables = h('div');
  const paint = async () => {
    const [ents, stats] = await Promise.all([loadEntities(), loadStats().catch(() => null)]);
    // A refresh would take the focus from a keyboard user on one of the entity links.
    if (tables.contains(document.activeElement)) return;
    const head = (first) => h('thead', {}, h('tr', {}, [first, 'Status', 'Active', 'Scheduled', 'Dead-lettered', 'Size', 'In', 'Out', 'Connections', 'Links']
      .map((c, i) => h('th', { scope: 'col', class: i >= 2 ? 'num' : null }, c))));
    const dlqCell = (e, c) => (e.dlqGrowing ? h('td', { class: 'num problem-cell' }, h('span', { class: 'badge bad', title: 'Dead-letter queue growing' }, `${c.dead} ▲`)) : null);
    const cells = (e, c) => {
      const base = countCells(c);
      const grow = dlqCell(e, c);
      if (grow) base[2] = grow;
      return [...base, ...rateCells(e)];
    };
    tables.replaceChildren(
      h('section', { class: 'panel', 'aria-labelledby': 'queues-h' },
        h('h3', { id: 'queues-h' }, `Queues (${ents.queues.length})`),
        ents.queues.length === 0 ? h('p', { class: 'note' }, 'No queues yet.') :
          h('div', { class: 'scroll' }, h('table', { id: 'queues' }, head('Queue'),
            h('tbody', {}, ents.queues.map((q) => {
              const e = entStats(stats, q.name);
              return h('tr', { class: e.dlqGrowing ? 'problem' : null, 'data-entity': q.name },
                h('th', { scope: 'row' }, h('a', { href: '#/q/' + enc(q.name) }, q.name)),
                h('td', {}, val(q.d, 'Status')), ...cells(e, q.c));
            }))))),
      h('section', { class: 'panel', 'aria-labelledby': 'topics-h' },
        h('h3', { id: 'topics-h' }, `Topics (${ents.topics.length})`),
        ents.topics.length === 0 ? h('p', { class: 'note' }, 'No topics yet.') :
          h('div', { class: 'scroll' }, h('table', { id: 'topics' }, head('Topic / subscription'),
            h('tbody', {}, ents.topics.flatMap((t) => [
              h('tr', { 'data-entity': t.name }, h('th', { scope: 'row' }, h('a', { href: '#/t/' + enc(t.name) }, t.name)),
                h('td', {}, val(t.d, 'Status')), ...cells(entStats(stats, t.name), t.c)),
              ...t.subs.map((s) => {
                const e = entStats(stats, t.name, s.name);
                return h('tr', { class: 'sub' + (e.dlqGrowing ? ' problem' : ''), 'data-entity': `${t.name}/${s.name}` },
                  h('th', { scope: 'row' }, h('a', { href: `#/t/${enc(t.name)}/s/${enc(s.name)}` }, s.name)),
                  h('td', {}, val(s.d, 'Status')), ...cells(e, s.c));
              })]))))));
  };
  await paint();
  draw(h('h2', {}, 'Entities'),
    h('p', { class: 'note' }, `Counts refresh every ${POLL_MS / 1000} s. In and Out are messages per second over the last refresh (stored, and delivered); Connections and Links are the clients attached now.`),
    tables,
    h('section', { class: 'panel', 'aria-labelledby': 'newq-h' }, h('h3', { id: 'newq-h' }, 'New queue'), qForm),
    h('section', { class: 'panel', 'aria-labelledby': 'newt-h' }, h('h3', { id: 'newt-h' }, 'New topic'), tForm));
  if (view === state.view) poll(() => paint().catch(() => {}));
}

// Property fields per kind: [element, label, type, createOnly].
const PROPS = {
  queue: [
    ['LockDuration', 'Lock duration (ISO 8601)', 'text'],
    ['MaxDeliveryCount', 'Max delivery count', 'number'],
    ['DefaultMessageTimeToLive', 'Default message TTL (ISO 8601)', 'text'],
    ['MaxSizeInMegabytes', 'Max size (MB)', 'number'],
    ['Status', 'Status', 'status'],
    ['ForwardTo', 'Forward to', 'text'],
    ['ForwardDeadLetteredMessagesTo', 'Forward dead letters to', 'text'],
    ['UserMetadata', 'User metadata', 'text'],
    ['DeadLetteringOnMessageExpiration', 'Dead-letter on expiration', 'bool'],
    ['RequiresSession', 'Requires session', 'bool', true],
    ['RequiresDuplicateDetection', 'Duplicate detection', 'bool', true],
    ['EnablePartitioning', 'Partitioned', 'bool', true],
  ],
  topic: [
    ['DefaultMessageTimeToLive', 'Default message TTL (ISO 8601)', 'text'],
    ['MaxSizeInMegabytes', 'Max size (MB)', 'number'],
    ['Status', 'Status', 'status'],
    ['UserMetadata', 'User metadata', 'text'],
    ['RequiresDuplicateDetection', 'Duplicate detection', 'bool', true],
    ['EnablePartitioning', 'Partitioned', 'bool', true],
  ],
  subscription: [
    ['LockDuration', 'Lock duration (ISO 8601)', 'text'],
    ['MaxDeliveryCount', 'Max delivery count', 'number'],
    ['DefaultMessageTimeToLive', 'Default message TTL (ISO 8601)', 'text'],
    ['Status', 'Status', 'status'],
    ['ForwardTo', 'Forward to', 'text'],
    ['ForwardDeadLetteredMessagesTo', 'Forward dead letters to', 'text'],
    ['UserMetadata', 'User metadata', 'text'],
    ['DeadLetteringOnMessageExpiration', 'Dead-letter on expiration', 'bool'],
    ['RequiresSession', 'Requires session', 'bool', true],
  ],
};
const DESC = { queue: 'QueueDescription', topic: 'TopicDescription', subscription: 'SubscriptionDescription' };

// entityForm is the create (d null) or update form of an entity; onSave gets the XML.
function entityForm(kind, d, onSave) {
  const update = !!d;
  const inputs = [];
  const fields = [];
  const name = h('input', { name: 'name', required: true, autocomplete: 'off', id: `new-${kind}-name` });
  if (!update) fields.push(field(kind === 'subscription' ? 'Subscription name' : kind === 'queue' ? 'Queue name' : 'Topic name', name));
  for (const [el, label, type, createOnly] of PROPS[kind]) {
    let input;
    const cur = d ? val(d, el) : '';
    if (type === 'bool') {
      input = h('input', { type: 'checkbox', name: el, checked: cur === 'true', disabled: update && createOnly });
    } else if (type === 'status') {
      input = h('select', { name: el }, ['Active', 'Disabled', 'SendDisabled', 'ReceiveDisabled']
        .map((s) => h('option', { value: s, selected: (cur || 'Active') === s }, s)));
    } else {
      input = h('input', { name: el, type: type === 'number' ? 'number' : 'text', value: cur, autocomplete: 'off',
        min: type === 'number' ? 1 : null, placeholder: update ? null : 'default' });
    }
    input.id = `${update ? 'edit' : 'new'}-${kind}-${el}`;
    inputs.push([el, type, input, createOnly]);
    fields.push(field(label + (update && createOnly ? ' (set at creation)' : ''), input));
  }
  const err = h('div', { class: 'wide' });
  const form = h('form', { class: 'grid', 'aria-label': (update ? 'Update ' : 'Create ') + kind }, ...fields, err,
    h('div', { class: 'actions wide' }, h('button', { type: 'submit' }, update ? 'Save changes' : `Create ${kind}`)));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.replaceChildren();
    const els = [];
    for (const [el, type, input, createOnly] of inputs) {
      if (update && createOnly) continue;
      if (type === 'bool') els.push([el, input.checked ? 'true' : 'false']);
      else if (input.value.trim() !== '' || (update && (el === 'ForwardTo' || el === 'ForwardDeadLetteredMessagesTo' || el === 'UserMetadata'))) {
        els.push([el, input.value.trim()]);
      }
    }
    try {
      await onSave(descXML(DESC[kind], els), name.value.trim());
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  });
  return form;
}

// confirmButton asks for a second press before doing something that cannot be undone
// (a native confirm() would block a browser driven by tests, and is clumsy by keyboard).
function confirmButton(label, confirmLabel, action) {
  const b = h('button', { type: 'button', class: 'danger' }, label);
  let armed = false;
  b.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      b.textContent = confirmLabel;
      setTimeout(() => { armed = false; b.textContent = label; }, 5000);
      return;
    }
    armed = false;
    b.disabled = true;
    try { await action(); } finally { b.disabled = false; b.textContent = label; }
  });
  return b;
}

// ---- one entity

async function renderEntity(draw, view, t, tab) {
  const path = entityPath(t);
  const doc = await atom(path);
  const d = doc.getElementsByTagNameNS('*', DESC[t.kind])[0];
  if (!d) throw new Error(`${path} is not a ${t.kind}`);
  const base = t.kind === 'queue' ? `#/q/${enc(t.entity)}` : t.kind === 'topic' ? `#/t/${enc(t.entity)}` : `#/t/${enc(t.entity)}/s/${enc(t.sub)}`;
  const tabs = {
    queue: [['messages', 'Messages'], ['deadletter', 'Dead letters'], ['sessions', 'Sessions'], ['send', 'Send'], ['properties', 'Properties']],
    topic: [['subscriptions', 'Subscriptions'], ['send', 'Send'], ['properties', 'Properties']],
    subscription: [['messages', 'Messages'], ['deadletter', 'Dead letters'], ['sessions', 'Sessions'], ['rules', 'Rules'], ['properties', 'Properties']],
  }[t.kind];
  const cardsEl = h('dl', { class: 'cards', 'aria-label': 'Message counts' });
  const paintCounts = (dd) => {
    const c = counts(dd);
    const card = (label, v) => h('div', { class: 'card' }, h('dt', {}, label), h('dd', {}, String(v)));
    cardsEl.replaceChildren(card('Active', c.active), card('Scheduled', c.scheduled), card('Dead-lettered', c.dead),
      card('All (incl. deferred)', c.total), card('Size', fmtBytes(c.size)));
  };
  paintCounts(d);
  const title = t.kind === 'subscription' ? `${t.entity} / ${t.sub}` : t.entity;
  const body = h('div');
  draw(
    h('p', { class: 'crumbs' }, h('a', { href: '#/entities' }, 'Entities'), ' / ',
      t.kind === 'subscription' ? [h('a', { href: `#/t/${enc(t.entity)}` }, `topic ${t.entity}`), ' / subscription'] : t.kind),
    h('h2', {}, title, ' ', h('span', { class: 'badge' }, val(d, 'Status'))),
    cardsEl,
    h('nav', { 'aria-label': `${t.kind} sections` }, h('ul', { class: 'tabs' }, tabs.map(([k, label]) =>
      h('li', {}, h('a', { href: `${base}/${k}`, 'aria-current': k === tab ? 'page' : null }, label))))),
    body);
  poll(async () => {
    const dd = (await atom(path)).getElementsByTagNameNS('*', DESC[t.kind])[0];
    if (dd && view === state.view) paintCounts(dd);
  });
  switch (tab) {
    case 'messages': body.append(messagesPanel(t, false, val(d, 'RequiresSession') === 'true')); break;
    case 'deadletter': body.append(messagesPanel(t, true), redrivePanel(t)); break;
    case 'send': body.append(sendPanel(t)); break;
    case 'sessions': body.append(sessionsPanel(t, val(d, 'RequiresSession') === 'true')); break;
    case 'subscriptions': body.append(await subscriptionsPanel(t)); break;
    case 'rules': body.append(await rulesPanel(t)); break;
    case 'properties': body.append(propertiesPanel(t, d)); break;
    default: body.append(h('p', {}, 'No such section.'));
  }
}

function propertiesPanel(t, d) {
  const path = entityPath(t);
  const form = entityForm(t.kind, d, async (xml) => {
    await putDesc(path, xml, true);
    status('Saved');
    route();
  });
  const err = h('div');
  // Purge as the SDKs' purgeMessages does (batch delete): the entity, then its dead
  // letters; locked messages and messages scheduled for later stay.
  const bar = h('progress', { id: 'purge-progress', max: 1, value: 0, 'aria-label': 'Purge progress', hidden: true });
  const msg = h('p', { id: 'purge-status', role: 'status' });
  const purge = t.kind === 'topic' ? null : confirmButton('Purge all messages', 'Press again to purge', async () => {
    err.replaceChildren();
    bar.hidden = false;
    bar.value = 0;
    msg.textContent = 'Purging…';
    try {
      const last = await progressStream('/$ui/api/purge', { entity: t.entity, subscription: t.sub || undefined }, (p) => {
        bar.max = Math.max(p.total || 0, p.done, 1);
        bar.value = p.done;
        msg.textContent = `Purging… ${p.done}` + (p.total ? ` of ${Math.max(p.total, p.done)}` : '');
      });
      msg.textContent = `Purged ${last.done} message(s)` + (last.deadLettered ? `, ${last.deadLettered} of them dead-lettered` : '') + '.';
      if (last.error) err.replaceChildren(errorBox(last.error));
      status(msg.textContent);
    } catch (e) { err.replaceChildren(errorBox(e)); msg.textContent = ''; }
  });
  if (purge) purge.id = 'purge-all';
  const del = confirmButton(`Delete ${t.kind}`, 'Press again to delete', async () => {
    try {
      await request('DELETE', path, { query: { 'api-version': API_VERSION } });
      status(`Deleted ${t.kind}`);
      location.hash = t.kind === 'subscription' ? `#/t/${enc(t.entity)}/subscriptions` : '#/entities';
    } catch (e) { err.replaceChildren(errorBox(e)); }
  });
  return h('div', {},
    h('section', { class: 'panel', 'aria-labelledby': 'props-h' }, h('h3', { id: 'props-h' }, 'Properties'), form,
      h('p', { class: 'note' }, `Created ${fmtTime(val(d, 'CreatedAt'))}, updated ${fmtTime(val(d, 'UpdatedAt'))}.`)),
    h('section', { class: 'panel', 'aria-labelledby': 'danger-h' }, h('h3', { id: 'danger-h' }, 'Danger zone'),
      purge ? h('p', { class: 'note' }, 'Purge removes the messages and dead letters, as the SDKs\' purgeMessages does: messages a receiver holds locked, and messages scheduled for later, stay.') : null,
      h('div', { class: 'actions' }, purge, del), purge ? h('div', { class: 'actions' }, bar, msg) : null, err));
}

// ---- messages

function bodyText(m, mode) {
  const bytes = Uint8Array.from(atob(m.body || ''), (c) => c.charCodeAt(0));
  let text = null;
  try { text = new TextDecoder('utf-8', { fatal: true }).decode(bytes); } catch (_) { text = null; }
  if (mode === 'auto') {
    if (text === null || /[\u0000-\u0008\u000e-\u001f]/.test(text)) mode = 'hex';
    else {
      try { JSON.parse(text); mode = 'json'; } catch (_) { mode = 'text'; }
    }
  }
  if (mode === 'json') {
    try { return { mode, text: JSON.stringify(JSON.parse(text), null, 2) }; } catch (_) { mode = 'text'; }
  }
  if (mode === 'text' && text !== null) return { mode, text };
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = [...bytes.slice(i, i + 16)];
    lines.push(i.toString(16).padStart(6, '0') + '  ' + row.map((b) => b.toString(16).padStart(2, '0')).join(' ').padEnd(48) +
      ' ' + row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join(''));
  }
  return { mode: 'hex', text: lines.join('\n') };
}

function preview(m) {
  const { text } = bodyText(m, 'auto');
  const s = text.replace(/\s+/g, ' ');
  return s.length > 60 ? s.slice(0, 60) + '…' : s;
}

function messageDetail(m, dlq, t, onChange) {
  const props = [['Sequence number', m.sequenceNumber], ['Message ID', m.messageId], ['State', m.state],
    ['Enqueued', fmtTime(m.enqueuedTime)], ['Scheduled for', fmtTime(m.scheduledEnqueueTime)],
    ['Expires', fmtTime(m.expiresAt)], ['Delivery count', m.deliveryCount], ['Subject', m.subject],
    ['Content type', m.contentType], ['Correlation ID', m.correlationId], ['Session ID', m.sessionId],
    ['Partition key', m.partitionKey], ['To', m.to], ['Reply to', m.replyTo], ['Time to live', m.timeToLive]];
  if (dlq) props.push(['Dead-letter reason', m.deadLetterReason], ['Dead-letter description', m.deadLetterErrorDescription],
    ['Dead-letter source', m.deadLetterSource]);
  const pre = h('pre', { class: 'body', id: 'message-body', tabindex: '0', 'aria-label': 'Message body' });
  const mode = h('select', { id: 'body-mode' }, [['auto', 'Automatic'], ['text', 'Text'], ['json', 'JSON'], ['hex', 'Hex']]
    .map(([v, l]) => h('option', { value: v }, l)));
  const note = h('span', { class: 'note' });
  const paint = () => {
    const b = bodyText(m, mode.value);
    pre.textContent = b.text;
    note.textContent = `shown as ${b.mode}, ${atob(m.body || '').length} bytes` + (m.bodyType !== 'data' ? `, AMQP ${m.bodyType} body` : '');
  };
  mode.addEventListener('change', paint);
  paint();
  const app = Object.entries(m.applicationProperties || {});
  let cancel = null;
  if (m.state === 'Scheduled' && t) {
    const err = h('span');
    cancel = h('div', { class: 'actions' }, confirmButton('Cancel this scheduled message', 'Press again to cancel it', async () => {
      try {
        await json('POST', '/$ui/api/scheduled/cancel', { entity: t.entity, sequenceNumbers: [m.sequenceNumber] });
        status(`Scheduled message ${m.sequenceNumber} cancelled`);
        if (onChange) onChange();
      } catch (e) { err.replaceChildren(errorBox(e)); }
    }), err);
  }
  return h('section', { class: 'detail', 'aria-label': `Message ${m.sequenceNumber}`, tabindex: '-1' },
    h('h3', {}, `Message ${m.sequenceNumber}`), cancel,
    h('dl', { class: 'props' }, props.filter(([, v]) => v !== '' && v !== undefined && v !== null)
      .flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))])),
    h('h3', {}, 'Application properties'),
    app.length === 0 ? h('p', { class: 'note' }, 'None.') :
      h('dl', { class: 'props' }, app.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { class: 'mono' }, JSON.stringify(v))])),
    h('h3', {}, 'Body'),
    h('div', { class: 'actions' }, field('Show body as', mode), note),
    pre);
}

function messagesPanel(t, dlq, sessionful) {
  // AMQP peeks an entity that requires sessions one session at a time.
  const sessionIn = sessionful && !dlq ? h('input', { id: 'peek-session', list: 'peek-sessions', autocomplete: 'off', required: true }) : null;
  const sessionList = sessionIn ? h('datalist', { id: 'peek-sessions' }) : null;
  if (sessionList) {
    json('POST', '/$ui/api/sessions', { entity: t.entity, subscription: t.sub || undefined, top: 1000 })
      .then((r) => sessionList.replaceChildren(...r.sessions.map((x) => h('option', { value: x.sessionId }))))
      .catch(() => {});
  }
  const count = h('input', { type: 'number', min: 1, max: 500, value: 50, id: dlq ? 'dlq-count' : 'peek-count' });
  const from = h('input', { type: 'number', min: 0, value: '', placeholder: 'from the start', id: dlq ? 'dlq-from' : 'peek-from' });
  const filter = h('select', { id: 'peek-state' }, ['All', 'Active', 'Scheduled', 'Deferred'].map((s) => h('option', { value: s }, s)));
  const out = h('div', { 'aria-live': 'polite' });
  const detail = h('div');
  const peek = async () => {
    out.replaceChildren(h('p', { class: 'note' }, 'Peeking…'));
    detail.replaceChildren();
    try {
      const r = await json('POST', '/$ui/api/peek', { entity: t.entity, subscription: t.sub || undefined, deadLetter: dlq,
        count: Number(count.value) || 50, fromSequenceNumber: Number(from.value) || 0,
        sessionId: sessionIn ? sessionIn.value.trim() : undefined });
      const msgs = dlq || filter.value === 'All' ? r.messages : r.messages.filter((m) => m.state === filter.value);
      const cols = dlq ? ['Seq', 'Message ID', 'Reason', 'Description', 'Enqueued', 'Subject', 'Body', '']
        : ['Seq', 'Message ID', 'State', 'Enqueued', 'Scheduled for', 'Deliveries', 'Session', 'Subject', 'Body', ''];
      out.replaceChildren(msgs.length === 0 ? h('p', { class: 'note', id: dlq ? 'dlq-empty' : 'peek-empty' }, 'No messages.') :
        h('div', { class: 'scroll' }, h('table', { id: dlq ? 'dlq-messages' : 'messages' },
          h('caption', { class: 'note' }, `${msgs.length} message(s), peeked without locking`),
          h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, msgs.map((m) => {
            const view = h('button', { type: 'button', class: 'small secondary', 'aria-label': `View message ${m.sequenceNumber}` }, 'View');
            view.addEventListener('click', () => {
              detail.replaceChildren(messageDetail(m, dlq, t.sub ? null : t, peek));
              detail.firstChild.focus();
            });
            const cells = dlq ? [m.deadLetterReason, m.deadLetterErrorDescription, fmtTime(m.enqueuedTime), m.subject]
              : [m.state, fmtTime(m.enqueuedTime), fmtTime(m.scheduledEnqueueTime), m.deliveryCount, m.sessionId, m.subject];
            return h('tr', {}, h('td', { class: 'num' }, m.sequenceNumber), h('td', { class: 'mono' }, m.messageId),
              cells.map((c) => h('td', {}, c === undefined ? '' : String(c))), h('td', { class: 'mono' }, preview(m)), h('td', {}, view));
          })))));
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  };
  const form = h('form', { class: 'grid', 'aria-label': dlq ? 'Peek dead letters' : 'Peek messages' },
    sessionIn ? field('Session', sessionIn) : null, sessionList,
    field('How many', count), field('From sequence number', from), dlq ? null : field('State', filter),
    h('div', { class: 'actions' }, h('button', { type: 'submit', id: dlq ? 'dlq-peek' : 'peek' }, dlq ? 'Peek dead letters' : 'Peek')));
  form.addEventListener('submit', (ev) => { ev.preventDefault(); peek(); });
  return h('section', { class: 'panel', 'aria-labelledby': dlq ? 'dlq-h' : 'msgs-h' },
    h('h3', { id: dlq ? 'dlq-h' : 'msgs-h' }, dlq ? 'Dead-lettered messages' : 'Messages'),
    h('p', { class: 'note' }, dlq ? 'The dead-letter sub-queue, with the reason each message was dead-lettered.'
      : sessionIn ? `This ${t.kind} requires sessions, and AMQP peeks those one session at a time: the peek holds the session's lock while it runs, and a session a consumer holds cannot be peeked.`
        : 'Active, scheduled and deferred messages, in sequence order. Peeking locks nothing.'),
    form, out, detail);
}

function redrivePanel(t) {
  const source = t.sub ? `the topic ${t.entity} (its subscriptions' rules route it again)` : `the queue ${t.entity}`;
  const to = h('input', { id: 'resubmit-to', autocomplete: 'off', placeholder: t.entity });
  const limit = h('input', { id: 'resubmit-limit', type: 'number', min: 0, value: '', placeholder: 'all' });
  const bar = h('progress', { id: 'redrive-progress', max: 1, value: 0, 'aria-label': 'Progress' });
  const msg = h('p', { id: 'redrive-status', role: 'status' });
  const err = h('div');
  const run = async (purge) => {
    err.replaceChildren();
    const path = entityPath(t);
    const dd = (await atom(path)).getElementsByTagNameNS('*', DESC[t.kind])[0];
    let total = counts(dd).dead;
    const lim = Number(limit.value) || 0;
    if (lim > 0) total = Math.min(total, lim);
    bar.max = Math.max(total, 1);
    bar.value = 0;
    const verb = purge ? 'Purged' : 'Resubmitted';
    msg.textContent = `${purge ? 'Purging' : 'Resubmitting'}… 0 of ${total}`;
    const last = await progressStream(purge ? '/$ui/api/deadletter/purge' : '/$ui/api/deadletter/resubmit',
      { entity: t.entity, subscription: t.sub || undefined, to: purge ? undefined : (to.value.trim() || undefined), limit: lim }, (p) => {
        if (p.total) total = p.total; // what the node counted when it started
        bar.max = Math.max(total, p.done, 1);
        bar.value = p.done;
        msg.textContent = `${purge ? 'Purging' : 'Resubmitting'}… ${p.done} of ${Math.max(total, p.done)}`;
      });
    msg.textContent = `${verb} ${last.done} message(s)` + (purge ? '' : ` to ${to.value.trim() || source}`) + '.';
    if (last.error) err.replaceChildren(errorBox(last.error));
    status(msg.textContent);
  };
  const go = (purge) => async () => {
    try { await run(purge); } catch (e) { err.replaceChildren(errorBox(e)); msg.textContent = ''; }
  };
  const resubmit = h('button', { type: 'button', id: 'resubmit' }, 'Resubmit');
  resubmit.addEventListener('click', async () => { resubmit.disabled = true; try { await go(false)(); } finally { resubmit.disabled = false; } });
  return h('section', { class: 'panel', 'aria-labelledby': 'redrive-h' },
    h('h3', { id: 'redrive-h' }, 'Resubmit or purge'),
    h('p', { class: 'note' }, `Resubmit sends a copy of each dead-lettered message (without its dead-letter reason) to ${source}, or to the entity you name, and only then removes it from the dead-letter queue.`),
    h('form', { class: 'grid', 'aria-label': 'Resubmit dead letters', onsubmit: (ev) => ev.preventDefault() },
      field('Resubmit to (empty: the source)', to), field('At most (empty: all)', limit),
      h('div', { class: 'actions wide' }, resubmit, confirmButton('Purge dead letters', 'Press again to purge', go(true)))),
    h('div', { class: 'actions' }, bar, msg), err);
}

function sessionsPanel(t, enabled) {
  const out = h('div', { 'aria-live': 'polite' });
  const detail = h('div');
  const load = async () => {
    out.replaceChildren(h('p', { class: 'note' }, 'Loading…'));
    detail.replaceChildren();
    try {
      const r = await json('POST', '/$ui/api/sessions', { entity: t.entity, subscription: t.sub || undefined, top: 1000 });
      out.replaceChildren(r.sessions.length === 0 ? h('p', { class: 'note', id: 'sessions-empty' }, 'No session has messages or state.') :
        h('div', { class: 'scroll' }, h('table', { id: 'sessions' },
          h('caption', { class: 'note' }, `${r.sessions.length} of ${r.total} session(s) with messages or state`),
          h('thead', {}, h('tr', {}, ['Session', 'State', ''].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, r.sessions.map((s) => {
            const m = { body: s.state || '', bodyType: 'data' };
            const view = s.state ? h('button', { type: 'button', class: 'small secondary', 'aria-label': `View the state of session ${s.sessionId}` }, 'View state') : '';
            if (view) view.addEventListener('click', () => {
              const pre = h('pre', { class: 'body', id: 'session-state', tabindex: '0', 'aria-label': `State of session ${s.sessionId}` }, bodyText(m, 'auto').text);
              detail.replaceChildren(h('section', { class: 'detail', 'aria-label': `Session ${s.sessionId}` },
                h('h3', {}, `State of session ${s.sessionId}`), pre));
              pre.focus();
            });
            return h('tr', {}, h('th', { scope: 'row', class: 'mono' }, s.sessionId),
              h('td', { class: 'mono' }, s.state ? `${preview(m)} (${atob(s.state).length} bytes)` : h('span', { class: 'note' }, 'none')),
              h('td', {}, view));
          })))));
    } catch (e) {
      out.replaceChildren(errorBox(e));
    }
  };
  const refresh = h('button', { type: 'button', id: 'sessions-load' }, 'Refresh');
  refresh.addEventListener('click', load);
  if (enabled) load();
  return h('section', { class: 'panel', 'aria-labelledby': 'sessions-h' },
    h('h3', { id: 'sessions-h' }, 'Sessions'),
    h('p', { class: 'note' }, enabled ? 'Sessions with messages or state. Reading the state takes no lock: consumers keep their sessions.'
      : `This ${t.kind} does not require sessions, so its messages belong to none.`),
    h('div', { class: 'actions' }, refresh), out, detail);
}

function sendPanel(t) {
  const bodyIn = h('textarea', { id: 'send-body', rows: 6, spellcheck: 'false' }, '{"hello": "world"}');
  const ct = h('input', { id: 'send-content-type', value: 'application/json', autocomplete: 'off' });
  const subject = h('input', { id: 'send-subject', autocomplete: 'off' });
  const mid = h('input', { id: 'send-message-id', autocomplete: 'off', placeholder: 'generated' });
  const corr = h('input', { id: 'send-correlation-id', autocomplete: 'off' });
  const sess = h('input', { id: 'send-session-id', autocomplete: 'off' });
  const sched = h('input', { id: 'send-scheduled', type: 'datetime-local' });
  const props = h('textarea', { id: 'send-properties', rows: 3, spellcheck: 'false', placeholder: 'key=value, one a line' });
  const msg = h('p', { id: 'send-status', role: 'status' });
  const err = h('div', { class: 'wide' });
  const form = h('form', { class: 'grid', 'aria-label': 'Send a test message' },
    field('Body', bodyIn, 'wide'), field('Content type', ct), field('Subject', subject), field('Message ID', mid),
    field('Correlation ID', corr), field('Session ID', sess), field('Schedule for (local time; empty: now)', sched),
    field('Application properties', props, 'wide'), err,
    h('div', { class: 'actions wide' }, h('button', { type: 'submit', id: 'send' }, 'Send message'), msg));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.replaceChildren();
    msg.textContent = '';
    const ap = {};
    for (const line of props.value.split('\n')) {
      const i = line.indexOf('=');
      if (line.trim() && i <= 0) { err.replaceChildren(errorBox(`"${line}" is not key=value`)); return; }
      if (i > 0) ap[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    try {
      const r = await json('POST', '/$ui/api/send', { entity: t.entity, body: bodyIn.value, contentType: ct.value.trim() || undefined,
        subject: subject.value.trim() || undefined, messageId: mid.value.trim() || undefined,
        correlationId: corr.value.trim() || undefined, sessionId: sess.value.trim() || undefined,
        applicationProperties: Object.keys(ap).length ? ap : undefined,
        scheduledEnqueueTime: sched.value ? new Date(sched.value).toISOString().replace(/\.\d+Z$/, 'Z') : undefined });
      msg.textContent = r.sequenceNumber ? `Scheduled as sequence number ${r.sequenceNumber}.` : `Sent to ${t.entity}.`;
      status(msg.textContent);
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  });
  return h('section', { class: 'panel', 'aria-labelledby': 'send-h' }, h('h3', { id: 'send-h' }, `Send a test message to ${t.entity}`), form);
}

// ---- topics: subscriptions and rules

async function subscriptionsPanel(t) {
  const sd = await atom(`/${enc(t.entity)}/Subscriptions`, { '$top': 1000 });
  const subs = entriesOf(sd, 'SubscriptionDescription');
  const form = entityForm('subscription', null, async (xml, name) => {
    await putDesc(`/${enc(t.entity)}/Subscriptions/${enc(name)}`, xml, false);
    status(`Subscription ${name} created`);
    location.hash = `#/t/${enc(t.entity)}/s/${enc(name)}`;
  });
  return h('div', {},
    h('section', { class: 'panel', 'aria-labelledby': 'subs-h' }, h('h3', { id: 'subs-h' }, `Subscriptions (${subs.length})`),
      subs.length === 0 ? h('p', { class: 'note' }, 'None yet.') : h('table', { id: 'subscriptions' },
        h('thead', {}, h('tr', {}, ['Subscription', 'Status', 'Active', 'Scheduled', 'Dead-lettered', 'Size']
          .map((c, i) => h('th', { scope: 'col', class: i >= 2 ? 'num' : null }, c)))),
        h('tbody', {}, subs.map((s) => h('tr', {},
          h('th', { scope: 'row' }, h('a', { href: `#/t/${enc(t.entity)}/s/${enc(s.name)}` }, s.name)),
          h('td', {}, val(s.d, 'Status')), ...countCells(counts(s.d))))))),
    h('section', { class: 'panel', 'aria-labelledby': 'newsub-h' }, h('h3', { id: 'newsub-h' }, 'New subscription'), form));
}

function filterText(r) {
  const f = r.getElementsByTagNameNS('*', 'Filter')[0];
  if (!f) return '';
  const type = f.getAttributeNS(NS_XSI, 'type') || '';
  if (type === 'CorrelationFilter') {
    return 'Correlation: ' + ['CorrelationId', 'MessageId', 'To', 'ReplyTo', 'Label', 'SessionId', 'ReplyToSessionId', 'ContentType']
      .map((k) => [k, val(f, k)]).filter(([, v]) => v).map(([k, v]) => `${k}=${v}`).join(', ');
  }
  return `${type.replace('Filter', '')}: ${val(f, 'SqlExpression')}`;
}

async function rulesPanel(t) {
  const base = `/${enc(t.entity)}/Subscriptions/${enc(t.sub)}/Rules`;
  const rd = await atom(base, { '$top': 1000 });
  const rules = entriesOf(rd, 'RuleDescription');
  const name = h('input', { id: 'rule-name', required: true, autocomplete: 'off' });
  const kind = h('select', { id: 'rule-kind' }, [['sql', 'SQL filter'], ['correlation', 'Correlation filter']].map(([v, l]) => h('option', { value: v }, l)));
  const sql = h('input', { id: 'rule-sql', autocomplete: 'off', placeholder: "color = 'blue'" });
  const corr = h('input', { id: 'rule-correlation-id', autocomplete: 'off' });
  const subj = h('input', { id: 'rule-subject', autocomplete: 'off' });
  const action = h('input', { id: 'rule-action', autocomplete: 'off', placeholder: "SET sys.Label = 'routed'" });
  const err = h('div', { class: 'wide' });
  let editing = false;
  const save = h('button', { type: 'submit' }, 'Create rule');
  const form = h('form', { class: 'grid', 'aria-label': 'Create or update a rule' },
    field('Rule name', name), field('Filter type', kind), field('SQL expression', sql),
    field('Correlation ID', corr), field('Subject (Label)', subj), field('Action (optional SQL)', action), err,
    h('div', { class: 'actions wide' }, save));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    err.replaceChildren();
    const filter = kind.value === 'sql'
      ? `<Filter i:type="SqlFilter"><SqlExpression>${esc(sql.value || '1=1')}</SqlExpression></Filter>`
      : `<Filter i:type="CorrelationFilter">${corr.value ? `<CorrelationId>${esc(corr.value)}</CorrelationId>` : ''}${subj.value ? `<Label>${esc(subj.value)}</Label>` : ''}</Filter>`;
    const act = action.value.trim() ? `<Action i:type="SqlRuleAction"><SqlExpression>${esc(action.value.trim())}</SqlExpression></Action>`
      : '<Action i:type="EmptyRuleAction"/>';
    try {
      await putDesc(`${base}/${enc(name.value.trim())}`, descXML('RuleDescription', [], filter + act), editing);
      status(`Rule ${name.value.trim()} saved`);
      route();
    } catch (e) { err.replaceChildren(errorBox(e)); }
  });
  const listErr = h('div');
  return h('div', {},
    h('section', { class: 'panel', 'aria-labelledby': 'rules-h' }, h('h3', { id: 'rules-h' }, `Rules (${rules.length})`),
      h('table', { id: 'rules' }, h('thead', {}, h('tr', {}, ['Rule', 'Filter', 'Action', ''].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rules.map((r) => {
          const a = r.d.getElementsByTagNameNS('*', 'Action')[0];
          const edit = h('button', { type: 'button', class: 'small secondary', 'aria-label': `Edit rule ${r.name}` }, 'Edit');
          edit.addEventListener('click', () => {
            const f = r.d.getElementsByTagNameNS('*', 'Filter')[0];
            editing = true;
            name.value = r.name;
            name.readOnly = true;
            const corrType = f && f.getAttributeNS(NS_XSI, 'type') === 'CorrelationFilter';
            kind.value = corrType ? 'correlation' : 'sql';
            sql.value = corrType ? '' : val(f, 'SqlExpression');
            corr.value = corrType ? val(f, 'CorrelationId') : '';
            subj.value = corrType ? val(f, 'Label') : '';
            action.value = a ? val(a, 'SqlExpression') : '';
            save.textContent = 'Save rule';
            name.focus();
          });
          const del = confirmButton('Delete', 'Confirm', async () => {
            try {
              await request('DELETE', `${base}/${enc(r.name)}`, { query: { 'api-version': API_VERSION } });
              status(`Rule ${r.name} deleted`);
              route();
            } catch (e) { listErr.replaceChildren(errorBox(e)); }
          });
          del.classList.add('small');
          return h('tr', {}, h('th', { scope: 'row' }, r.name), h('td', { class: 'mono' }, filterText(r.d)),
            h('td', { class: 'mono' }, a ? val(a, 'SqlExpression') : ''), h('td', {}, h('div', { class: 'actions' }, edit, del)));
        }))), listErr),
    h('section', { class: 'panel', 'aria-labelledby': 'newrule-h' }, h('h3', { id: 'newrule-h' }, 'New or changed rule'), form));
}

// ---- start

window.addEventListener('hashchange', () => { state.navigated = true; route(); });
window.addEventListener('DOMContentLoaded', () => {
  $('#logout').addEventListener('click', () => { logout(); location.hash = '#/login'; });
  try { state.cred = JSON.parse(sessionStorage.getItem('qb.cred') || 'null'); } catch (_) { state.cred = null; }
  route();
});
