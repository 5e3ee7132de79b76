/* Refused: a valid ELF shared object that exports no rlx_plugin_init. */
int tp_not_an_entry(void);
int tp_not_an_entry(void) { return 42; }
