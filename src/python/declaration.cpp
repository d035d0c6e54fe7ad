// The Python module's declaration as the plugin ABI states it: bridge.load's tuple read into
// family declarations and parameter spaces that stay alive for the host, and the module's identity.
#include "src/python/bridge_internal.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace attn::python_bridge {

Decl g_decl;
bool g_cuda = false;
std::string g_identity;

namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

} // namespace

std::string str_of(PyObject* o) {
  if (o == nullptr || !PyUnicode_Check(o)) {
    return "";
  }
  // Not PyUnicode_AsUTF8: a str holding a lone surrogate (a path decoded with surrogateescape)
  // has no UTF-8 form, and its NULL would be read as text. Such characters become \udcff.
  PyObject* b = PyUnicode_AsEncodedString(o, "utf-8", "backslashreplace");
  if (b == nullptr) {
    PyErr_Clear();
    return "(text that cannot be encoded)";
  }
  std::string out(PyBytes_AS_STRING(b), std::size_t(PyBytes_GET_SIZE(b)));
  Py_DECREF(b);
  return out;
}

bool take_declaration(PyObject* decl, const std::string& spec, std::string& err) {
  PyObject* fams = PyTuple_GetItem(decl, 3);
  g_decl = Decl{};
  g_decl.name = str_of(PyTuple_GetItem(decl, 0));
  g_decl.version = str_of(PyTuple_GetItem(decl, 1));
  g_cuda = str_of(PyTuple_GetItem(decl, 2)) == "cuda";
  g_decl.engine_rule = str_of(PyTuple_GetItem(decl, 6));
  g_decl.has_prepare = PyObject_IsTrue(PyTuple_GetItem(decl, 7)) == 1;
  // The files the sources sha256 is over, as a JSON array of their relative paths.
  std::string files;
  PyObject* hashed = PyTuple_GetItem(decl, 8);
  for (Py_ssize_t i = 0; i < PyList_Size(hashed); ++i) {
    files += std::string(i == 0 ? "" : ", ") + "\"" +
             json_escape(str_of(PyList_GetItem(hashed, i))) + "\"";
  }
  g_identity = "{\"module\": \"" + json_escape(spec) + "\", \"sources_sha256\": \"" +
               json_escape(str_of(PyTuple_GetItem(decl, 4))) + "\", \"file\": \"" +
               json_escape(str_of(PyTuple_GetItem(decl, 5))) + "\", \"files\": [" + files + "]}";
  const Py_ssize_t nf = PyList_Size(fams);
  // Reserve first: the declaration points into these vectors.
  std::size_t total_params = 0;
  for (Py_ssize_t i = 0; i < nf; ++i) {
    total_params += std::size_t(PyList_Size(PyTuple_GetItem(PyList_GetItem(fams, i), 3)));
  }
  g_decl.param_names.reserve(total_params);
  g_decl.param_values.reserve(total_params);
  g_decl.spaces.resize(std::size_t(nf));
  for (Py_ssize_t i = 0; i < nf; ++i) {
    PyObject* f = PyList_GetItem(fams, i);
    attn_family_decl d{};
    // bridge.load gives the family and layout as their ABI numbers.
    d.family = attn_family(PyLong_AsLong(PyTuple_GetItem(f, 0)));
    d.kv_layout = attn_kv_layout(PyLong_AsLong(PyTuple_GetItem(f, 1)));
    d.writes_lse = PyObject_IsTrue(PyTuple_GetItem(f, 2)) == 1 ? 1 : 0;
    PyObject* params = PyTuple_GetItem(f, 3);
    auto& space = g_decl.spaces[std::size_t(i)];
    for (Py_ssize_t k = 0; k < PyList_Size(params); ++k) {
      PyObject* p = PyList_GetItem(params, k);
      g_decl.param_names.emplace_back(str_of(PyTuple_GetItem(p, 0)));
      std::vector<int> vals;
      PyObject* vs = PyTuple_GetItem(p, 1);
      for (Py_ssize_t j = 0; j < PyList_Size(vs); ++j) {
        vals.push_back(int(PyLong_AsLong(PyList_GetItem(vs, j))));
      }
      g_decl.param_values.push_back(std::move(vals));
      attn_param_space ps{};
      ps.name = g_decl.param_names.back().c_str();
      ps.values = g_decl.param_values.back().data();
      ps.num_values = int(g_decl.param_values.back().size());
      space.push_back(ps);
    }
    d.params = space.empty() ? nullptr : space.data();
    d.num_params = int(space.size());
    g_decl.families.push_back(d);
    // bridge.load gives the fp8 caches the family reads as its ABI 4 mask.
    g_decl.kv_dtypes.push_back(uint32_t(PyLong_AsUnsignedLong(PyTuple_GetItem(f, 4))));
  }
  if (PyErr_Occurred()) {
    err = "the module's declaration could not be read: " + python_error();
    return false;
  }
  return true;
}

int declared_index(attn_family f) {
  for (std::size_t i = 0; i < g_decl.families.size(); ++i) {
    if (g_decl.families[i].family == f) {
      return int(i);
    }
  }
  return -1;
}

} // namespace attn::python_bridge
