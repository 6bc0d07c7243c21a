package org.ferry.yarn;

import java.util.regex.Pattern;

/**
 * What may be an application's id, the rule ferry_server applies too (server/storage/ids.h,
 * IsValidAppId), checked against one table of cases (tests/testdata/app_ids.tsv): 1 to 128 of
 * letters, digits, '_', '.' and '-', not starting with '.' (so never "." or "..", nor a hidden
 * or temporary file of the hand-off dir). YARN's are application_&lt;cluster timestamp&gt;_&lt;n&gt;.
 */
final class AppIds {
  private static final Pattern APP_ID = Pattern.compile("[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}");

  private AppIds() {}

  static boolean isValid(String appId) {
    return appId != null && APP_ID.matcher(appId).matches();
  }
}
