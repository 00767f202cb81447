"""The web console: `leaseq serve --console-listen HOST:PORT` (see README "Console").

    app.py        the aiohttp application: routes, the auth/CSRF/error middleware, access log
    sessions.py   sign-in sessions (cookie), their CSRF tokens and visitors' stateless ones
    api.py        the JSON API over core.QueueCore (every grant checked there, as for gRPC)
    static/       the page, its script and style: plain files, shipped as package data

The browser side is one page (static/index.html) whose script renders each view from the JSON
API; no build step, no CDN, nothing fetched from elsewhere (it works offline).
"""
