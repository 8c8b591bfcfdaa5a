/* Compiled as C (not run): the public C header must be valid C. */
#include "linattn/linattn.h"

int linattn_c_header_check(void) {
  linattn_forward_inputs in;
  linattn_forward_outputs out;
  linattn_options opt = linattn_default_options();
  char err[256];
  size_t bytes = 0;
  linattn_forward_inputs_init(&in);
  linattn_forward_outputs_init(&out);
  return linattn_forward_workspace_size(LINATTN_KDA, &in, &opt, &bytes, err, sizeof err);
}
