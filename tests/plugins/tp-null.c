/* Refused: its entry point declines (returns NULL). */
#include "tp.h"
TP_EXPORT { (void)host; return NULL; }
