"""The HTML pages: the self-contained report and what the web UI's pages share with it.

- ``view``: the report's view model, the JSON document the page draws (docs/report-view-model.md);
- ``html``: the report page: ``templates/report.html.j2`` and the script ``static/*.js``, joined into one
  ``report.js`` (one scope, no build tool), in a file or served;
- ``compare``, ``difftree``: the compare page's differential flame graph and the one colour of a differential
  node;
- ``templating``: the Jinja2 environment and filters of the web UI's pages (``serve/web/templates``), also used for
  the pages written as files.
"""
