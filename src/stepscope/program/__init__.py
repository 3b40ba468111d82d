"""The program as the CLI sees it, from outside its process:

- ``run``: ``stepscope run``'s parent side: the child's command line and run row, signals relayed, the status
  settled;
- ``client``: finding a running program's control server (``record.control``) and asking it for a capture;
- ``pyspy``: sampling a program without a server from outside, with py-spy.
"""
