"""The SQL vocabulary the domain is written in: Core tables, hot precompiled statements, JSON
and message-content codecs, the typed records rows become, and the validation of bad input."""
