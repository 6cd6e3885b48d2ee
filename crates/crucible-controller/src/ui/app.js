// crucible's web UI: the little script its server-rendered pages use (no build step).
'use strict';

// Swaps a fragment in from the server: `data-src` is its URL.
function refresh(el) {
  return fetch(el.dataset.src, { credentials: 'same-origin' })
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(String(r.status)))))
    .then((html) => {
      el.innerHTML = html;
      watchImages(el);
    })
    .catch(() => {});
}

// An image that does not decode is a failed inline view: its file offers the download.
function watchImages(root) {
  root.querySelectorAll('img.evidence').forEach((img) => {
    const fail = () => img.closest('.file').classList.add('failed');
    if (img.complete && img.naturalWidth === 0) fail();
    img.addEventListener('error', fail);
  });
}

document.addEventListener('DOMContentLoaded', () => {
  watchImages(document);

  // Fragments refreshed on a period (`data-poll`, in milliseconds).
  document.querySelectorAll('[data-poll]').forEach((el) => {
    setInterval(() => refresh(el), Number(el.dataset.poll));
  });

  // A run's page: its summary, graph and tasks follow the run's event stream.
  const run = document.querySelector('[data-events]');
  if (run) {
    const events = new EventSource(run.dataset.events);
    let queued = false;
    const update = () => {
      if (queued) return;
      queued = true;
      setTimeout(() => {
        queued = false;
        document.querySelectorAll('[data-live]').forEach(refresh);
      }, 200);
    };
    ['plan_admitted', 'task_started', 'task_result', 'resumed', 'shutdown'].forEach((name) =>
      events.addEventListener(name, update),
    );
    events.addEventListener('end', () => {
      events.close();
      update();
    });
  }

  // The open decisions: a browser notification for each request this subject may answer that
  // this tab has not announced yet, linking to its evidence page.
  const list = document.querySelector('[data-decisions]');
  if (list) {
    const key = 'crucible-notified';
    const announced = new Set(JSON.parse(sessionStorage.getItem(key) || '[]'));
    const button = document.getElementById('notify');
    const poll = async () => {
      const r = await fetch(list.dataset.decisions, { credentials: 'same-origin' });
      if (!r.ok) return;
      const open = (await r.json()).decisions;
      const shown = new Set([...list.querySelectorAll('[data-key]')].map((e) => e.dataset.key));
      let changed = shown.size !== open.length;
      for (const d of open) {
        const id = d.run + '/' + d.route + '/' + d.digest;
        if (!shown.has(id)) changed = true;
        if (announced.has(id) || !('Notification' in window)) continue;
        if (Notification.permission !== 'granted') continue;
        const n = new Notification('Decision needed: ' + d.route, {
          body: 'Run ' + d.run + ' waits for your answer.',
          tag: id,
          data: { url: d.url },
        });
        n.onclick = () => {
          window.focus();
          location.href = d.url;
        };
        announced.add(id);
      }
      sessionStorage.setItem(key, JSON.stringify([...announced]));
      if (changed) refresh(list);
    };
    if (button) {
      button.addEventListener('click', () => {
        if ('Notification' in window) Notification.requestPermission().then(poll);
      });
    }
    poll();
    setInterval(poll, 2000);
  }
});
