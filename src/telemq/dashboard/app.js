// The telemq dashboard's script (a classic script, no build step; index.html loads it after
// the two vendor bundles, Chart.js and MQTT.js, which may be missing: see below).
//
// How it works: the login form checks the user name and password against the admin REST
// API (GET /api/v1/overview with HTTP Basic auth); they are then kept in this script's
// memory only (never in storage or cookies) and sent as `Authorization: Basic ...` with
// every request, until "Log out", a reload, or a 401 from the API. The overview is polled
// every 2 s: its counters since the broker's start become rates (the difference between two
// polls over the time between them) that Chart.js draws with the number of connections.
// The tab shown (clients, sessions, subscriptions, retained) is reloaded every 3 s and on
// every change of its search boxes; rows are built with textContent only, since client ids,
// topics and payloads come from anyone who can connect. The topic viewer connects the
// browser itself to the broker with MQTT.js over WebSocket (ws[s]://<this host>/mqtt) as
// the logged-in user and lists the messages that arrive. Without Chart.js the overview
// shows its numbers and a notice instead of charts; without MQTT.js the viewer shows a
// notice; everything else works either way. The broker's Content-Security-Policy allows
// no inline script or style and no eval: everything here is in this file.
(function () {
  'use strict';

  const API = '/api/v1';
  const OVERVIEW_MS = 2000;
  const TABLE_MS = 3000;
  const HISTORY = 90; // chart points kept (3 minutes at one poll every 2 s)
  const PAGE_SIZE = 100;
  const VIEWER_MAX = 500; // messages kept in the topic viewer
  const PAYLOAD_SHOWN = 300; // characters of a payload shown in a cell (more in its title)

  const state = {
    auth: null, // the Authorization header's value, while logged in
    user: '',
    password: '', // for the topic viewer's MQTT CONNECT
    tab: 'overview',
    timers: [],
    busy: {}, // a request of that name is under way: another waits for its end (again)
    again: {},
    offsets: { clients: 0, sessions: 0, subscriptions: 0, retained: 0 },
    totals: {},
    previous: null, // the last overview sample: {time, received, sent}
    charts: null,
    viewer: null, // {client, filter} while the topic viewer is on
  };

  const $ = (id) => document.getElementById(id);

  // -- formatting (every value ends up as text) -------------------------------------------

  const text = (value) => (value === null || value === undefined ? '' : String(value));
  const fmtInt = (v) => (typeof v === 'number' ? v.toLocaleString('en-US') : text(v));
  const fmtTime = (iso) => (iso ? String(iso).replace('T', ' ').replace(/(\.\d+)?Z$/, ' UTC')
    : '—');
  const fmtRate = (v) => (v === null ? '—' : v.toFixed(v < 10 ? 1 : 0) + '/s');
  const yesNo = (value) => (value ? 'yes' : 'no');

  function fmtBytes(value) {
    if (typeof value !== 'number') return text(value);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let unit = 0;
    for (; value >= 1024 && unit < units.length - 1; unit += 1) value /= 1024;
    return (unit === 0 ? String(value) : value.toFixed(1)) + ' ' + units[unit];
  }

  function fmtDuration(seconds) {
    if (typeof seconds !== 'number') return text(seconds);
    const s = Math.floor(seconds);
    const parts = [[Math.floor(s / 86400), 'd'], [Math.floor(s / 3600) % 24, 'h'],
      [Math.floor(s / 60) % 60, 'm'], [s % 60, 's']];
    while (parts.length > 1 && parts[0][0] === 0) parts.shift();
    return parts.map(([n, unit]) => n + unit).join(' ');
  }

  const shorten = (s, max) => (text(s).length > max ? text(s).slice(0, max) + '…' : text(s));

  // -- HTTP -------------------------------------------------------------------------------

  // An error of the API: `status` is the HTTP status (0: no answer).
  const apiError = (status, message) => Object.assign(new Error(message), { status });

  // RFC 7617 with UTF-8 (btoa alone takes Latin-1 only).
  const basicAuth = (user, password) =>
    'Basic ' + btoa(String.fromCharCode(...new TextEncoder().encode(user + ':' + password)));

  function query(params) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) {
      if (value !== '' && value !== null && value !== undefined) search.set(key, String(value));
    }
    const s = search.toString();
    return s ? '?' + s : '';
  }

  // A topic in a URL path: every level escaped, the '/' between them kept.
  const topicPath = (topic) => topic.split('/').map(encodeURIComponent).join('/');

  async function api(method, path, body, auth) {
    const headers = { Accept: 'application/json', Authorization: auth || state.auth };
    // credentials 'omit': the browser neither adds its own HTTP auth nor prompts on a 401.
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (error) {
      throw apiError(0, 'The broker cannot be reached: ' + error.message);
    }
    if (response.status === 204) return null;
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const found = data && typeof data.error === 'string';
      throw apiError(response.status, found ? data.error : 'HTTP ' + response.status);
    }
    return data;
  }

  function reportError(error) {
    if (error.status === 401) logout('Logged out: ' + error.message);
    else $('app-error').textContent = error.message || String(error);
  }

  const clearError = () => $('app-error').textContent && ($('app-error').textContent = '');

  // -- DOM helpers ------------------------------------------------------------------------

  function el(tag, value, className) {
    const node = document.createElement(tag);
    if (value !== undefined) node.textContent = text(value);
    if (className) node.className = className;
    return node;
  }

  function button(label, className, onClick) {
    const node = el('button', label, className);
    node.type = 'button';
    node.addEventListener('click', onClick);
    return node;
  }

  // A column: 'field kind' (kinds: mono, int, bytes, time, yes, dash; none: the plain
  // value), or a function of the row returning text or a Node.
  const KINDS = {
    mono: [text, 'mono'], int: [fmtInt, 'num'], bytes: [fmtBytes, 'num'],
    time: [fmtTime, 'time'], yes: [yesNo, ''],
    dash: [(v) => (v === '' || v === null || v === undefined ? '—' : text(v)), ''],
  };

  function cellOf(column, row) {
    if (typeof column === 'function') return [column(row), ''];
    const [key, kind] = column.split(' ');
    const [format, className] = KINDS[kind] || [text, ''];
    return [format(row[key]), className];
  }

  function renderRows(tableId, rows, columns, emptyText, decorate) {
    const fragment = document.createDocumentFragment();
    if (rows.length === 0) {
      const td = el('td', emptyText, 'muted');
      td.colSpan = columns.length;
      fragment.appendChild(el('tr', undefined, 'empty')).appendChild(td);
    }
    for (const row of rows) {
      const tr = document.createElement('tr');
      for (const column of columns) {
        const [value, className] = cellOf(column, row);
        const td = tr.appendChild(el('td', value instanceof Node ? undefined : value, className));
        if (value instanceof Node) td.appendChild(value);
      }
      if (decorate) decorate(tr, row);
      fragment.appendChild(tr);
    }
    $(tableId).tBodies[0].replaceChildren(fragment);
  }

  function payloadCell(payload) {
    const span = el('span', shorten(payload, PAYLOAD_SHOWN), 'payload');
    span.title = text(payload).slice(0, 10000);
    return span;
  }

  // -- the lists --------------------------------------------------------------------------

  // A button that asks first, then sends a DELETE and reloads the list.
  function deleteButton(label, question, path, list) {
    const node = button(label, 'danger', async () => {
      if (!window.confirm(question)) return;
      node.disabled = true;
      try {
        await api('DELETE', path);
      } catch (error) {
        reportError(error);
      }
      refreshList(list);
    });
    return node;
  }

  function disconnectButton(row) {
    const question = 'Disconnect client "' + row.client_id + '"?';
    const path = '/clients/' + encodeURIComponent(row.client_id);
    const node = deleteButton('Disconnect', question, path, 'clients');
    node.dataset.clientId = row.client_id;
    return node;
  }

  function deleteRetainedButton(row) {
    const question = 'Delete the retained message of "' + row.topic + '"?';
    const path = '/retained/' + topicPath(row.topic) + query({ sub_point: row.sub_point });
    return deleteButton('Delete', question, path, 'retained');
  }

  function subscriptionsLink(row) {
    return button(fmtInt(row.subscriptions), 'link', () => {
      $('subs-search').value = '';
      $('subs-client').value = row.client_id;
      state.offsets.subscriptions = 0;
      showTab('subscriptions');
    });
  }

  // The MQ SubName, with the SubUserData and CorrelId in its title.
  function subName(row) {
    const span = el('span', row.name || '—');
    span.title = [['user data', row.user_data], ['correl id', row.correl_id]]
      .filter(([, v]) => v).map(([k, v]) => k + ': ' + v).join('\n');
    return span;
  }

  const retainedPayload = (row) => payloadCell(row.payload);
  const identities = (row) => (row.identities || [])
    .map((identity) => identity.name + (identity.exclusive ? ' (exclusive)' : '')).join(', ');
  const queueName = (row) => (row.queue ? row.queue + (row.qmgr ? ' @ ' + row.qmgr : '') : '—');
  const inputValue = (id) => $(id).value.trim();

  const LISTS = {
    clients: {
      table: 'clients-table', count: 'clients-count', key: 'clients',
      empty: 'No connected client matches.',
      inputs: { search: 'clients-search' },
      columns: ['client_id mono', 'user dash', 'peer mono', 'protocol', 'transport',
        'connected_at time', (r) => r.keepalive + ' s',
        (r) => yesNo('persistent' in r ? r.persistent : !r.clean_start),
        subscriptionsLink, 'queued int', 'inflight int', disconnectButton],
      decorate: (tr, r) => {
        tr.dataset.clientId = r.client_id;
      },
    },
    sessions: {
      table: 'sessions-table', count: 'sessions-count', key: 'sessions',
      empty: 'No session matches.',
      inputs: { search: 'sessions-search' },
      columns: ['client_id mono', 'user dash', 'connected yes', 'persistent yes',
        'created_at time', 'expires_at time', 'subscriptions int', 'queued int', 'inflight int'],
    },
    subscriptions: {
      table: 'subs-table', count: 'subs-count', key: 'subscriptions',
      empty: 'No subscription matches.',
      inputs: { search: 'subs-search', client_id: 'subs-client' },
      columns: ['id int', 'topic mono', 'sub_point dash', 'kind', subName, 'owner mono', 'qos int',
        queueName, identities, (r) => (r.options || []).join(', '), 'filter dash',
        'persistence', 'created_at time', 'expires_at time'],
    },
    retained: {
      table: 'retained-table', count: 'retained-count', key: 'retained',
      empty: 'No retained message matches.',
      inputs: { topic: 'retained-filter', sub_point: 'retained-sub-point' }, // topic: '#' if ''
      columns: ['topic mono', 'sub_point dash', 'qos int', 'size bytes', retainedPayload,
        'published_at time', 'expires_at time', deleteRetainedButton],
    },
  };

  async function refreshList(name) {
    const list = LISTS[name];
    if (!state.auth) return;
    if (state.busy[name]) {
      state.again[name] = true; // the search may have changed: ask again after this one
      return;
    }
    state.busy[name] = true;
    try {
      const offset = state.offsets[name];
      const params = Object.entries(list.inputs).map(([key, id]) => [key, inputValue(id)]);
      const where = query({ ...Object.fromEntries(params), limit: PAGE_SIZE, offset });
      const data = await api('GET', '/' + name + where);
      if (!state.auth) return;
      const rows = data[list.key] || [];
      state.totals[name] = typeof data.total === 'number' ? data.total : rows.length;
      $(list.count).textContent = (rows.length ? offset + 1 : 0) + '–' + (offset + rows.length) +
        ' of ' + fmtInt(state.totals[name]);
      renderRows(list.table, rows, list.columns, list.empty, list.decorate);
      clearError();
    } catch (error) {
      reportError(error);
    } finally {
      state.busy[name] = false;
      if (state.again[name]) {
        state.again[name] = false;
        refreshList(name);
      }
    }
  }

  function page(name, step) {
    const next = state.offsets[name] + step * PAGE_SIZE;
    if (next < 0 || next >= (state.totals[name] || 0)) return;
    state.offsets[name] = next;
    refreshList(name);
  }

  // -- overview and charts ----------------------------------------------------------------

  const STATS = [
    ['connections', 'Connections', fmtInt], ['sessions', 'Sessions', fmtInt],
    ['subscriptions', 'Subscriptions', fmtInt], ['retained_messages', 'Retained messages', fmtInt],
    ['received_rate', 'Received', fmtRate], ['sent_rate', 'Sent', fmtRate],
    ['messages_received', 'Messages received', fmtInt], ['messages_sent', 'Messages sent', fmtInt],
    ['messages_dropped', 'Messages dropped', fmtInt],
    ['bytes_received', 'Bytes received', fmtBytes], ['bytes_sent', 'Bytes sent', fmtBytes],
    ['journal_last_seq', 'Journal sequence', fmtInt], ['uptime_seconds', 'Uptime', fmtDuration],
  ];

  function renderStats(values) {
    const fragment = document.createDocumentFragment();
    for (const [key, label, format] of STATS) {
      const box = fragment.appendChild(el('div', undefined, 'stat'));
      box.dataset.stat = key;
      box.appendChild(el('dt', label));
      box.appendChild(el('dd', key in values ? format(values[key]) : '—'));
    }
    $('overview-stats').replaceChildren(fragment);
  }

  function lineChart(canvas, sets) {
    const datasets = sets.map(([label, color]) => ({
      label, data: [], borderColor: color, backgroundColor: color + '33', fill: true,
      pointRadius: 2, borderWidth: 2, tension: 0.25,
    }));
    return new window.Chart(canvas, {
      type: 'line',
      data: { labels: [], datasets },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        interaction: { mode: 'index', intersect: false },
        scales: { y: { beginAtZero: true, ticks: { precision: 0 } } },
        plugins: { legend: { position: 'bottom' } },
      },
    });
  }

  function makeCharts() {
    if (typeof window.Chart !== 'function') {
      $('charts-notice').hidden = false;
      $('charts').hidden = true;
      return null;
    }
    return {
      connections: lineChart($('chart-connections'), [['Connections', '#2563eb']]),
      messages: lineChart($('chart-messages'), [['Received/s', '#16a34a'], ['Sent/s', '#d97706']]),
    };
  }

  function pushPoint(chart, label, values) {
    chart.data.labels.push(label);
    chart.data.datasets.forEach((set, i) => set.data.push(values[i]));
    if (chart.data.labels.length > HISTORY) {
      chart.data.labels.shift();
      chart.data.datasets.forEach((set) => set.data.shift());
    }
    chart.update('none');
  }

  function clearCharts() {
    for (const chart of Object.values(state.charts || {})) {
      chart.data.labels.length = 0;
      chart.data.datasets.forEach((set) => (set.data.length = 0));
      chart.update('none');
    }
  }

  // Which broker serves this page: in a group ([ha]) the active member (a standby serves no
  // page), since when, and how often this member took over.
  function roleText(data) {
    if (!data.broker) return '';
    if (!data.ha) return 'broker ' + data.broker;
    const since = new Date(data.role_since * 1000).toLocaleString('en-GB', { hour12: false });
    const takeovers = data.ha_takeovers === 1 ? '1 takeover' : fmtInt(data.ha_takeovers) + ' takeovers';
    return `${data.role} member ${data.member} of ${data.broker} since ${since} (${takeovers})`;
  }

  function showOverview(data) {
    const now = performance.now();
    const values = { received_rate: null, sent_rate: null, ...data };
    const previous = state.previous;
    if (previous && now > previous.time) {
      const seconds = (now - previous.time) / 1000;
      values.received_rate = Math.max(0, (data.messages_received - previous.received) / seconds);
      values.sent_rate = Math.max(0, (data.messages_sent - previous.sent) / seconds);
    }
    state.previous = { time: now, received: data.messages_received, sent: data.messages_sent };
    $('broker-version').textContent = data.version ? 'version ' + data.version : '';
    $('broker-role').textContent = roleText(data);
    renderStats(values);
    if (state.charts) {
      const label = new Date().toLocaleTimeString('en-GB', { hour12: false });
      pushPoint(state.charts.connections, label, [data.connections]);
      if (values.received_rate !== null) {
        pushPoint(state.charts.messages, label, [values.received_rate, values.sent_rate]);
      }
    }
  }

  async function refreshOverview() {
    if (!state.auth || state.busy.overview) return;
    state.busy.overview = true;
    try {
      const data = await api('GET', '/overview');
      if (state.auth) showOverview(data);
    } catch (error) {
      reportError(error);
    } finally {
      state.busy.overview = false;
    }
  }

  // -- the topic viewer -------------------------------------------------------------------

  const viewerStatus = (message) => ($('viewer-status').textContent = message);
  const mqttAvailable = () => typeof window.mqtt === 'object' && window.mqtt !== null &&
    typeof window.mqtt.connect === 'function';

  function viewerSubscribeNow() {
    const viewer = state.viewer;
    const filter = viewer.filter;
    viewer.client.subscribe(filter, { qos: 2 }, (error, granted) => {
      if (state.viewer !== viewer || viewer.filter !== filter) return;
      if (error) viewerStatus('Subscribe failed: ' + error.message);
      else if (granted && granted[0] && granted[0].qos >= 128) viewerStatus('Refused: ' + filter);
      else viewerStatus('Subscribed to ' + filter);
    });
  }

  function viewerMessage(topic, payload, packet) {
    const tbody = $('viewer-messages');
    const tr = document.createElement('tr');
    tr.appendChild(el('td', new Date().toISOString().slice(11, 23), 'mono'));
    tr.appendChild(el('td', topic, 'mono'));
    // Invalid UTF-8 becomes U+FFFD, as in the admin API's retained payloads.
    tr.appendChild(el('td')).appendChild(payloadCell(new TextDecoder('utf-8').decode(payload)));
    tr.appendChild(el('td', packet.qos, 'num'));
    tr.appendChild(el('td', yesNo(packet.retain)));
    tbody.insertBefore(tr, tbody.firstChild);
    while (tbody.rows.length > VIEWER_MAX) tbody.deleteRow(-1);
  }

  function viewerSubscribe(event) {
    event.preventDefault();
    const filter = inputValue('viewer-filter');
    if (!filter || !state.auth || !mqttAvailable()) return;
    const viewer = state.viewer;
    if (viewer) {
      if (viewer.filter === filter) return;
      viewer.client.unsubscribe(viewer.filter);
      viewer.filter = filter;
      if (viewer.client.connected) viewerSubscribeNow();
      return;
    }
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    const random = Array.from(crypto.getRandomValues(new Uint8Array(6)),
      (b) => b.toString(16).padStart(2, '0')).join('');
    const client = window.mqtt.connect(scheme + location.host + '/mqtt', {
      username: state.user,
      password: state.password,
      protocolVersion: 4,
      clientId: 'telemq-dashboard-' + random,
      clean: true,
      keepalive: 60,
      connectTimeout: 10000,
      reconnectPeriod: 3000,
      // Plain setTimeout: MQTT.js's default runs its timers in a worker made from a blob:
      // URL, which the page's Content-Security-Policy (script-src 'self') refuses.
      timerVariant: 'native',
    });
    state.viewer = { client, filter };
    viewerStatus('Connecting…');
    client.on('connect', () => viewerSubscribeNow());
    client.on('message', (topic, payload, packet) => viewerMessage(topic, payload, packet));
    client.on('reconnect', () => viewerStatus('Reconnecting…'));
    client.on('error', (error) => viewerStatus('Error: ' + error.message));
    client.on('offline', () => viewerStatus('Disconnected'));
  }

  function viewerStop() {
    if (state.viewer) state.viewer.client.end(true);
    state.viewer = null;
    viewerStatus('Not connected');
  }

  async function publish(event) {
    event.preventDefault();
    const status = $('publish-status');
    status.textContent = 'Publishing…';
    try {
      const result = await api('POST', '/publish', {
        topic: $('publish-topic').value,
        payload: $('publish-payload').value,
        qos: Number($('publish-qos').value),
        retain: $('publish-retain').checked,
        sub_point: '',
      });
      status.textContent = 'Published to ' + result.topic;
    } catch (error) {
      status.textContent = '';
      reportError(error);
    }
  }

  // -- tabs, login, timers ----------------------------------------------------------------

  function showTab(name) {
    state.tab = name;
    for (const tab of document.querySelectorAll('[data-tab]')) {
      tab.setAttribute('aria-selected', String(tab.dataset.tab === name));
    }
    for (const panel of document.querySelectorAll('[data-panel]')) {
      panel.hidden = panel.dataset.panel !== name;
    }
    if (name in LISTS) refreshList(name);
    if (name === 'viewer' && !mqttAvailable()) {
      $('viewer-notice').hidden = false;
      $('viewer-subscribe').disabled = true;
    }
  }

  function stopTimers() {
    state.timers.forEach(clearInterval);
    state.timers = [];
  }

  function startTimers() {
    stopTimers();
    state.timers.push(setInterval(refreshOverview, OVERVIEW_MS));
    state.timers.push(setInterval(() => state.tab in LISTS && refreshList(state.tab), TABLE_MS));
  }

  // Shows the login form, or the tabs and who is logged in.
  function showLoggedIn(yes) {
    $('login').hidden = yes;
    ['app', 'logout', 'session-user'].forEach((id) => ($(id).hidden = !yes));
  }

  function enter(user, password, auth, overview) {
    Object.assign(state, { auth, user, password, previous: null });
    showLoggedIn(true);
    $('session-user').textContent = 'Logged in as ' + user;
    if (!state.charts) state.charts = makeCharts();
    clearCharts();
    showTab(state.tab);
    showOverview(overview);
    startTimers();
  }

  function logout(message) {
    stopTimers();
    viewerStop();
    Object.assign(state, { auth: null, user: '', password: '' });
    showLoggedIn(false);
    $('login-error').textContent = typeof message === 'string' ? message : '';
    $('login-password').focus();
  }

  async function login(event) {
    event.preventDefault();
    const user = $('login-user').value;
    const password = $('login-password').value;
    const auth = basicAuth(user, password);
    $('login-error').textContent = '';
    $('login-submit').disabled = true;
    try {
      const overview = await api('GET', '/overview', undefined, auth);
      $('login-password').value = '';
      enter(user, password, auth, overview);
    } catch (error) {
      $('login-error').textContent = error.message || String(error);
    } finally {
      $('login-submit').disabled = false;
    }
  }

  function debounce(fn, ms) {
    let timer = null;
    return () => {
      clearTimeout(timer);
      timer = setTimeout(fn, ms);
    };
  }

  function init() {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', () => logout(''));
    for (const tab of document.querySelectorAll('[data-tab]')) {
      tab.addEventListener('click', () => showTab(tab.dataset.tab));
    }
    for (const [name, list] of Object.entries(LISTS)) {
      const reload = debounce(() => {
        state.offsets[name] = 0;
        refreshList(name);
      }, 250);
      Object.values(list.inputs).forEach((id) => $(id).addEventListener('input', reload));
    }
    for (const pager of document.querySelectorAll('[data-pager]')) {
      pager.addEventListener('click', () => page(pager.dataset.pager, Number(pager.dataset.step)));
    }
    $('viewer-form').addEventListener('submit', viewerSubscribe);
    $('viewer-stop').addEventListener('click', viewerStop);
    $('viewer-clear').addEventListener('click', () => $('viewer-messages').replaceChildren());
    $('publish-form').addEventListener('submit', publish);
    renderStats({});
    $('login-user').focus();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
