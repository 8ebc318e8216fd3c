# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve``: the kvviz UI in a browser, one app process per tab, on textual-serve.

- :mod:`.plan`: what a server serves, fixed when it starts (:class:`~.plan.ServePlan`): each
  page's path and the exact command line its tabs run. Nothing a browser sends becomes part
  of a command; a path the plan does not hold is a 404.
- :mod:`.sessions`: one tab's app process (:class:`~.sessions.GroupedAppService`), started in
  a process group of its own and reaped, with everything it started, when the tab closes,
  the browser goes away, the app crashes or the server stops.
- :mod:`.server`: the web server (:class:`~.server.KvvizServer`): the landing page, the app
  pages, the session cap, downloads, shutdown.

The CLI (:mod:`kvviz.serve.command`) builds the plan and starts the server; this package
imports neither the CLI nor the UI (the app runs in the processes it starts).
"""
