/* jw.h - the little JSON writing the viewers share: strings escaped so that
 * the text is valid UTF-8 JSON and safe inside an HTML <script> element
 * ('<', '>' and '&' as \u escapes; bytes that are not UTF-8 become U+FFFD),
 * and numbers in the fixed forms the viewers use. Writes straight to a FILE;
 * the caller checks ferror at the end. */
#ifndef FP_VIZ_JW_H
#define FP_VIZ_JW_H

#include <stdint.h>
#include <stdio.h>

/* "s" with escapes (NULL writes null) */
void fpi_jw_str(FILE *f, const char *s);
/* a time in microseconds: three decimals (nanoseconds), "-0.000" written as 0 */
void fpi_jw_us(FILE *f, double us);
/* an int64 */
void fpi_jw_i64(FILE *f, int64_t v);
/* text with the HTML specials escaped (&, <, >, ", '); bytes that are not
 * UTF-8 become U+FFFD */
void fpi_html_text(FILE *f, const char *s);

#endif
