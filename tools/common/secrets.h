/* The secrets of the URIs a tool was given (secrets.c): remembered while
 * its arguments are parsed, before any other thread runs, and masked out of
 * every line it prints. */
#ifndef OUTBOX_TOOLS_SECRETS_H
#define OUTBOX_TOOLS_SECRETS_H

/* Remembers the passwords and other secrets of uri (user info, password=,
 * token=, ... parameters, in a URI or a key=value string), as written,
 * percent-decoded and unquoted, so that no line the tool prints shows
 * them: each becomes "***". */
void tool_note_secrets(const char *uri);
/* A secret given on its own (a password from the environment or a file):
 * masked like those of the URIs. */
void tool_note_secret(const char *secret);
void tool_forget_secrets(void);
/* text with every remembered secret replaced by "***"; malloc'd, NULL on
 * ENOMEM. */
char *tool_redact(const char *text);
/* The value of one hexadecimal digit (either case), or -1 (for the
 * percent-decoding of URIs and forms). */
int tool_hex_digit(char c);
/* uri with its secrets masked, for showing it; malloc'd, NULL on ENOMEM. */
char *tool_mask_uri(const char *uri);

#endif
