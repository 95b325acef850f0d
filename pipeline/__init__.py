"""The work the commands run, end to end, above every library: one index built (``build``), and the demo's
builds and eval beside the service (``demo``). The command line parses options into these and prints what they
tell it; nothing here prints."""
