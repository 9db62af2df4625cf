#!/usr/bin/env python3
"""Drives headless Chromium through the Chrome DevTools Protocol for
dead_letters_browser.sh: loads a route's dead-letter page over HTTPS with
basic authentication, clicks one row's replay button with real mouse events
(Input.dispatchMouseEvent at the button's centre), then opens a page of
another origin that submits a forged replay form to the relay in the same
browser session. Prints one JSON object with what it saw.

The protocol runs over --remote-debugging-pipe (file descriptors 3 and 4,
messages ended by NUL): no port to pick, no websocket library.

  dead_letters_browser.py CHROMIUM PROFILE_DIR SPKI_HASH PAGE_URL EVENT_ID FORGE_URL
"""
import json
import os
import select
import subprocess
import sys
import time


class Browser:
    def __init__(self, argv):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # The shell puts the pipes where Chromium looks for them.
        script = 'exec "$0" "$@" 3<&%d 4>&%d' % (to_chrome_r, from_chrome_w)
        self.proc = subprocess.Popen(['sh', '-c', script] + argv, pass_fds=(to_chrome_r, from_chrome_w),
                                     stdout=subprocess.DEVNULL, stderr=open(os.devnull, 'w'))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b''
        self._id = 0
        self.events = []  # every event seen, in order

    def close(self):
        try:
            self.call('Browser.close', timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _read(self, deadline):
        """The next message, or None at the deadline."""
        while b'\0' not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError('chromium closed the DevTools pipe')
            self._buf += chunk
        msg, self._buf = self._buf.split(b'\0', 1)
        return json.loads(msg)

    def call(self, method, params=None, session=None, timeout=30):
        self._id += 1
        msg = {'id': self._id, 'method': method, 'params': params or {}}
        if session:
            msg['sessionId'] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b'\0')
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m is None:
                raise RuntimeError('no answer to %s within %ss' % (method, timeout))
            if m.get('id') == self._id:
                if 'error' in m:
                    raise RuntimeError('%s: %s' % (method, m['error']))
                return m.get('result', {})
            if 'method' in m:
                self.events.append(m)

    def wait_event(self, pred, timeout=30, start=0):
        """The first event from index start on that pred accepts."""
        deadline = time.monotonic() + timeout
        i = start
        while True:
            while i < len(self.events):
                if pred(self.events[i]):
                    return self.events[i]
                i += 1
            m = self._read(deadline)
            if m is None:
                return None
            if 'method' in m:
                self.events.append(m)


def main():
    chromium, profile, spki, page_url, event_id, forge_url = sys.argv[1:7]
    b = Browser([chromium, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                 '--disable-background-networking', '--disable-component-update', '--disable-sync',
                 '--user-data-dir=' + profile, '--ignore-certificate-errors-spki-list=' + spki,
                 '--remote-debugging-pipe', 'about:blank'])
    out = {}
    try:
        targets = b.call('Target.getTargets')['targetInfos']
        page = next(t for t in targets if t['type'] == 'page')
        s = b.call('Target.attachToTarget', {'targetId': page['targetId'], 'flatten': True})['sessionId']
        for domain in ('Page', 'Network', 'Runtime'):
            b.call(domain + '.enable', session=s)

        def evaluate(expr):
            r = b.call('Runtime.evaluate', {'expression': expr, 'returnByValue': True}, session=s)
            if 'exceptionDetails' in r:
                raise RuntimeError('evaluate %s: %s' % (expr, r['exceptionDetails']))
            return r['result'].get('value')

        def loaded(since):
            return b.wait_event(lambda e: e['method'] == 'Page.loadEventFired' and e.get('sessionId') == s,
                                start=since)

        def document_status(since, path_end):
            """The status of the last document response whose URL ends so."""
            status = None
            for e in b.events[since:]:
                if e['method'] == 'Network.responseReceived' and e['params'].get('type') == 'Document':
                    if e['params']['response']['url'].split('?')[0].endswith(path_end):
                        status = e['params']['response']['status']
            return status

        # 1. The dead page, with the credentials in the URL (cached by the
        # browser for the origin once the server asks for them).
        mark = len(b.events)
        b.call('Page.navigate', {'url': page_url}, session=s)
        if loaded(mark) is None:
            raise RuntimeError('the dead page did not load')
        out['page_status'] = document_status(mark, '/dead')
        out['rows'] = evaluate('document.querySelectorAll("tr.dead").length')
        out['buttons'] = evaluate('document.querySelectorAll("button.replay").length')

        # 2. A real click on the row's replay button: the button's centre,
        # scrolled into view, pressed and released with the left button.
        box = evaluate('(() => { const b = document.querySelector(\'tr[data-event-id="%s"] button.replay\');'
                       ' if (!b) return null; b.scrollIntoView({block: "center"});'
                       ' const r = b.getBoundingClientRect();'
                       ' return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()' % event_id)
        if box is None:
            raise RuntimeError('no replay button for event %s' % event_id)
        out['click_at'] = box
        mark = len(b.events)
        for kind in ('mouseMoved', 'mousePressed', 'mouseReleased'):
            b.call('Input.dispatchMouseEvent', {'type': kind, 'x': box['x'], 'y': box['y'], 'button': 'left',
                                                'buttons': 1 if kind == 'mousePressed' else 0,
                                                'clickCount': 1}, session=s)
        if loaded(mark) is None:
            raise RuntimeError('the click led to no page')
        posts = [e for e in b.events[mark:] if e['method'] == 'Network.requestWillBeSent' and
                 e['params']['request']['method'] == 'POST']
        out['click_post'] = posts[0]['params']['request']['url'] if posts else None
        redirects = [e['params']['redirectResponse']['status'] for e in b.events[mark:]
                     if e['method'] == 'Network.requestWillBeSent' and 'redirectResponse' in e['params']]
        out['click_redirects'] = redirects
        out['after_click_status'] = document_status(mark, '/dead')
        out['after_click_url'] = evaluate('location.pathname + location.search')
        out['done'] = evaluate('(document.getElementById("done") || {}).textContent || null')

        # 3. A page of another origin submits a forged replay form to the
        # relay, in the same session (credentials cached).
        mark = len(b.events)
        b.call('Page.navigate', {'url': forge_url}, session=s)
        forged = b.wait_event(lambda e: e['method'] == 'Network.responseReceived' and
                              e['params']['response']['url'].endswith('/dead/replay'), start=mark)
        if forged is None:
            raise RuntimeError('the forged form was never answered')
        out['forge_status'] = forged['params']['response']['status']
        loaded(b.events.index(forged))  # the answer shown, its headers' events in
        reqs = [e for e in b.events[mark:] if e['method'] == 'Network.requestWillBeSent' and
                e['params']['request']['url'].endswith('/dead/replay')]
        out['forge_method'] = reqs[0]['params']['request']['method'] if reqs else None
        rid = forged['params']['requestId']
        sent = {}  # the headers the browser last sent with it
        for e in b.events[mark:]:
            if e['method'] == 'Network.requestWillBeSentExtraInfo' and e['params']['requestId'] == rid:
                sent = {k.lower(): v for k, v in e['params'].get('headers', {}).items()}
        out['forge_origin'] = sent.get('origin')
        out['forge_had_auth'] = 'authorization' in sent
        out['forge_had_cookie'] = 'cookie' in sent
        out['forge_body'] = evaluate('document.body ? document.body.innerText : null')
    except Exception as e:  # reported, not raised: the shell test says what failed
        out['error'] = str(e)
    finally:
        b.close()
    # URLs the browser reports keep the page URL's user:password@: not shown.
    text = json.dumps(out)
    creds = page_url.split('://', 1)[1].split('/', 1)[0].rpartition('@')[0]
    if creds:
        text = text.replace(creds + '@', '')
    print(text)


if __name__ == '__main__':
    main()
