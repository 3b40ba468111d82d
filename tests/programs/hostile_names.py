"""Spans, attributes, a thread name and argv whose text could break an HTML page that embeds it:
``<!--<script>`` (the parser's "escaped" state that swallows the next ``</script>``), ``</script>``,
``<script>``, and the line separators U+2028/U+2029. argv[1:] is shown in the report's run line."""
import threading

import stepscope

HOSTILE = ["<!--<script>", "</script><script>window.pwned=1</script>", "<script>window.pwned=2</script>",
           "line\u2028sep\u2029para & <b>bold</b>"]


def work() -> None:
    for name in HOSTILE:
        for k in range(3):
            with stepscope.span(name, note="<!--<script>", other="</script>\u2028") as s:
                s.set_attribute("k", k)


t = threading.Thread(target=work, name="<!--<script>\u2028thread")
t.start()
t.join()
