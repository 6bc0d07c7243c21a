package org.ferry.yarn;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;

import org.junit.Test;

/** The application id rule, against the table ferry_server's ids_test reads too. */
public class AppIdsTest {
  @Test
  public void applicationIdsAsTheSharedTableSays() throws Exception {
    List<String> lines = Files.readAllLines(
        Paths.get(System.getProperty("ferry.app.ids")), StandardCharsets.UTF_8);
    int cases = 0;
    for (String line : lines) {
      if (line.isEmpty() || line.startsWith("#")) continue;
      int tab = line.indexOf('\t');
      String verdict = line.substring(0, tab);
      String id = line.substring(tab + 1);
      assertTrue(line, verdict.equals("valid") || verdict.equals("invalid"));
      assertEquals("'" + id + "'", verdict.equals("valid"), AppIds.isValid(id));
      ++cases;
    }
    assertTrue(cases >= 20);
  }
}
